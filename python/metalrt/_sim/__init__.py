"""The simulated Metal device's Python side: the MSL -> C++ generator
(``msl_to_cpp``) that the build and ``compile_shader`` run."""
