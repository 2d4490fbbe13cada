// Failures the tests inject (_native._fail_next): a named point throws std::bad_alloc the next time any
// thread reaches it, so that the paths handling a failure run without memory or threads running out.
// Part of the native tokenizer core; no Python API here. A point costs one relaxed atomic load.
#pragma once

#include <atomic>
#include <new>

namespace lmprep_native {

enum FaultPoint : int {
    THREAD_START = 0,  // before a thread of a call is started
    WITHOUT_GIL = 1,   // at the start of work run with the GIL released
};

inline std::atomic<unsigned> armed_faults{0};  // bit p: point p throws once

inline void arm_fault(FaultPoint point) { armed_faults.fetch_or(1u << point); }

inline void fault_point(FaultPoint point) {
    const unsigned bit = 1u << point;
    if ((armed_faults.load(std::memory_order_relaxed) & bit) && (armed_faults.fetch_and(~bit) & bit))
        throw std::bad_alloc();
}

}  // namespace lmprep_native
