"""metalrt ops, one module per op family. Every op runs on the device of its Tensor
arguments; numpy arrays and lists are copied there first (to the CPU when no argument
is a Tensor). Results are Tensors on that device."""
