#include "sim/command_queue.h"

#include <chrono>

#include "sim/command_buffer.h"

namespace metalrt::sim {

double SimClockSeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

CommandQueue::CommandQueue(unsigned threads)
    : threads_(threads), pool_(threads), thread_([this] { Loop(); }) {}

CommandQueue::~CommandQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  thread_.join();
}

void CommandQueue::Submit(SimCommandBuffer* buffer) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(buffer);
  }
  ready_.notify_one();
}

EncodedCommands CommandQueue::TakeCommands() {
  std::lock_guard<std::mutex> lock(spare_mutex_);
  if (spare_.empty()) return {};
  EncodedCommands commands = std::move(spare_.back());
  spare_.pop_back();
  return commands;
}

void CommandQueue::ReturnCommands(EncodedCommands&& commands) {
  commands.Clear();
  std::lock_guard<std::mutex> lock(spare_mutex_);
  if (spare_.size() < kSpareCommands) spare_.push_back(std::move(commands));
}

void CommandQueue::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ready_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;   // stopping, and everything committed has run
    SimCommandBuffer* buffer = pending_.front();
    pending_.erase(pending_.begin());
    lock.unlock();
    buffer->Execute(pool_);
    lock.lock();
  }
}

}  // namespace metalrt::sim
