// Failures the tests inject (_native._fail_next): a named point throws std::bad_alloc once, when it is
// reached after a given number of passes, so that the paths handling a failure run without memory or
// threads running out. Part of the native tokenizer core; no Python API here. An idle point costs one
// relaxed atomic load.
#pragma once

#include <atomic>
#include <new>

namespace lmprep_native {

enum FaultPoint : int {
    THREAD_START = 0,  // before a thread of a call is started
    WITHOUT_GIL = 1,   // at the start of work run with the GIL released
};

inline std::atomic<int> fault_countdown[2]{-1, -1};  // per point: passes left before it throws; below 0: idle

inline void arm_fault(FaultPoint point, int after) { fault_countdown[point].store(after); }

inline void fault_point(FaultPoint point) {
    if (fault_countdown[point].load(std::memory_order_relaxed) >= 0 && fault_countdown[point].fetch_sub(1) == 0)
        throw std::bad_alloc();
}

}  // namespace lmprep_native
