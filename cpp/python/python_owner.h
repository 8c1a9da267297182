// Shared owners of Python objects, for runtime memory that a Python object owns (a
// numpy array, an np.memmap of a model file) and that tensors, Metal buffers and
// command buffers in flight keep alive. The last reference may go on any thread: a
// Python thread with or without the GIL, a Metal completion thread, the simulated
// device's queue. The owner therefore never waits for the GIL: without it, the
// reference is queued and dropped later on the main Python thread (Py_AddPendingCall),
// or by the next zero-copy wrapping on a thread holding the GIL. Taking the GIL there
// instead would block that thread behind any caller that holds the GIL while it waits
// for the GPU or for a lock the releasing thread holds, and a foreign thread taking
// the GIL while the interpreter finalises is stopped for good.
#pragma once
#include <memory>

#include "bind.h"

namespace metalrt::python {

// A new reference to `object` (the caller holds the GIL), dropped when the last copy
// of the returned owner goes. After the interpreter starts to exit (atexit) the
// reference is left to the exiting process instead.
std::shared_ptr<void> PythonOwner(nb::handle object);

// The exit hook that stops Python references being dropped from then on, and
// _release_on_thread, the test hook of tests/python/test_python_owner.py.
void BindPythonOwner(nb::module_& m);

}  // namespace metalrt::python
