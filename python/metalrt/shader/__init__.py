"""User Metal kernels: ``compile_shader`` compiles MSL source into a ``ShaderLibrary``
(``library``), whose kernels take Python arguments bound by MSL's rules (``arguments``)
against the reflection the MSL generator reports (declared parameter and constant
types, struct sizes: ``metalrt._sim.msl_emit``), over a source with its headers and
definitions (``source``)."""
from .library import ShaderKernel, ShaderLibrary, compile_shader, cxx_compiler

__all__ = ["ShaderKernel", "ShaderLibrary", "compile_shader", "cxx_compiler"]
