"""User Metal kernels: ``compile_shader`` compiles MSL source into a ``ShaderLibrary``
(``library``), whose kernels take Python arguments bound by MSL's rules (``arguments``,
``structs``: struct sizes and alignments) over a source with its headers and
definitions (``source``)."""
from .library import ShaderKernel, ShaderLibrary, compile_shader, cxx_compiler

__all__ = ["ShaderKernel", "ShaderLibrary", "compile_shader", "cxx_compiler"]
