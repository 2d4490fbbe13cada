// The threads of one native call: ranges of work, one per thread, the calling thread among them.
// Part of the native tokenizer core; no Python API here.
#pragma once

#include <cstddef>
#include <thread>
#include <vector>

#include "_native_fault.h"
#include "_native_split.h"

namespace lmprep_native {

// Runs work(r) for every r in [0, ranges): range 0 in the calling thread, each other one in a thread of
// its own. A range whose thread cannot start (no thread to be had, or no memory to start one) runs in the
// calling thread instead, so the result never depends on how many threads started. Every started thread
// is joined before this returns or throws (a joinable std::thread destroyed would end the process).
// work must not throw.
template <typename Work>
void run_ranges(size_t ranges, const Work &work) {
    std::vector<std::thread> workers;
    struct JoinAll {
        std::vector<std::thread> &threads;
        ~JoinAll() {
            for (std::thread &thread : threads)
                if (thread.joinable()) thread.join();
        }
    } join_all{workers};
    workers.reserve(ranges);  // may throw bad_alloc: no thread has started yet
    for (size_t r = 1; r < ranges; r++) {
        try {
            fault_point(THREAD_START);
            workers.emplace_back(work, r);
        } catch (...) {  // std::system_error or std::bad_alloc: this thread does the range
            work(r);
        }
    }
    if (ranges > 0) work(0);
}

// Where each of at most `ranges` consecutive ranges of the texts starts (and the last ends), cut so that
// each holds about the same number of characters.
inline std::vector<size_t> balanced_bounds(const TextView *texts, size_t count, size_t ranges) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++) total += texts[i].length + 1;
    std::vector<size_t> bounds{0};
    size_t seen = 0;
    for (size_t i = 0; i < count && bounds.size() < ranges; i++) {
        seen += texts[i].length + 1;
        if (seen * ranges >= total * bounds.size()) bounds.push_back(i + 1);
    }
    bounds.push_back(count);
    return bounds;
}

}  // namespace lmprep_native
