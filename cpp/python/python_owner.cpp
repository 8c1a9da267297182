// metalrt/python_owner.h: Python references released from any thread.
#include "python_owner.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "metalrt/tensor.h"

namespace metalrt::python {
namespace {

// References dropped by threads without the GIL, waiting for one that has it.
struct PendingReleases {
  std::mutex mutex;
  std::vector<PyObject*> objects;
  bool scheduled = false;   // a Py_AddPendingCall drain is queued
  bool exiting = false;     // atexit ran: Python may be torn down, so leave them
};

// Never destroyed: owners may go during static destruction, after Python is gone.
PendingReleases& Pending() {
  static auto* pending = new PendingReleases;
  return *pending;
}

// Drops the queued references, on a thread holding the GIL; `exiting` (the exit hook)
// also stops the queue filling again.
void DropPending(bool exiting = false) {
  std::vector<PyObject*> objects;
  {
    std::lock_guard<std::mutex> lock(Pending().mutex);
    objects.swap(Pending().objects);
    Pending().scheduled = false;
    Pending().exiting = Pending().exiting || exiting;
  }
  for (PyObject* object : objects) Py_DECREF(object);
}

int DropPendingCall(void*) {
  DropPending();
  return 0;
}

void Release(PyObject* object) {
  PendingReleases& pending = Pending();
  std::unique_lock<std::mutex> lock(pending.mutex);
  if (pending.exiting) return;
  if (PyGILState_Check()) {
    lock.unlock();
    Py_DECREF(object);
    return;
  }
  pending.objects.push_back(object);
  // Py_AddPendingCall needs neither the GIL nor a thread state; its queue is small,
  // so one call drains everything queued, and a full queue is retried next time.
  // Under our lock, so the exit hook cannot run between the check above and here.
  if (!pending.scheduled) pending.scheduled = Py_AddPendingCall(DropPendingCall, nullptr) == 0;
}

// Test hook: takes the tensor out of `box` (a one-element list, emptied, so the Python
// tensor goes), and a new thread, which never holds the GIL, drops that last reference
// while this thread waits for it for up to timeout_s with the GIL held, as a caller
// waiting for the GPU or a lock with the GIL held would. True when the thread finished
// within the timeout; it is joined before returning either way (without the GIL when
// it is still waiting for it), and the GIL is not given up in between when it was in time.
bool ReleaseOnThread(nb::list box, double timeout_s) {
  Tensor tensor = nb::cast<Tensor>(box[0]);
  box.clear();
  struct Done {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };
  auto done = std::make_shared<Done>();
  std::thread thread([tensor = std::move(tensor), done]() mutable {
    tensor = Tensor();
    std::lock_guard<std::mutex> lock(done->mutex);
    done->done = true;
    done->cv.notify_all();
  });
  bool in_time;
  {
    std::unique_lock<std::mutex> lock(done->mutex);
    in_time = done->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done->done; });
  }
  if (in_time) {
    thread.join();   // done: it needs the GIL no more (and keeps it, so no pending call runs)
  } else {
    nb::gil_scoped_release release;
    thread.join();
  }
  return in_time;
}

}  // namespace

std::shared_ptr<void> PythonOwner(nb::handle object) {
  DropPending();   // what threads without the GIL left, while this one has it
  return std::shared_ptr<void>(object.inc_ref().ptr(), [](void* p) { Release(static_cast<PyObject*>(p)); });
}

void BindPythonOwner(nb::module_& m) {
  nb::module_::import_("atexit").attr("register")(nb::cpp_function([] { DropPending(/*exiting=*/true); }));
  m.def("_release_on_thread", &ReleaseOnThread, nb::arg("box"), nb::arg("timeout_s"),
        "Test hook: a thread without the GIL drops the last reference to box[0], a Tensor,\n"
        "while the caller waits for it up to timeout_s seconds holding the GIL; True when\n"
        "it finished in time.");
}

}  // namespace metalrt::python
