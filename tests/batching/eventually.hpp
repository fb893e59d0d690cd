// Test helper: waits until a condition that nothing signals (a stats() snapshot, a server's counter)
// holds, instead of sleeping for a guessed time. The one polling loop the tests share (1 ms steps).
#pragma once

#include <chrono>
#include <thread>

namespace jitembed::test {

// True once pred() holds; false when `limit` passes first (the caller CHECKs/REQUIREs it).
template <class Pred>
bool eventually(Pred&& pred, std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace jitembed::test
