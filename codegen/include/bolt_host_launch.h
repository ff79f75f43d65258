// A CUDA launch emulated on the host, for tests on machines without a GPU.
//
// Bolt's own kernels (stitched, recurrent, glue, direct depthwise) write their bodies against a
// thread type: `bolt_detail::DeviceThread` wraps CUDA's built-ins on the device, `bolt_host::Thread`
// here runs each CUDA thread of a block as an OS thread. Barriers are real barriers and a
// full-warp shuffle is an exchange between the warp's 32 threads, so what a sequential host run
// cannot show does show here: a shuffle or barrier that not every thread reaches (the
// emulation aborts, naming it, instead of hanging), a read of shared memory nobody wrote
// (shared memory starts as NaNs), rows or elements the launch's grid misses, and, built with
// -fsanitize=thread, a missing barrier between a write and another thread's read.
// Blocks run one after another, as a GPU may run them.
#ifndef BOLT_HOST_LAUNCH_H
#define BOLT_HOST_LAUNCH_H

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

namespace bolt_host {

// A reusable barrier for `count` threads. A thread that waits longer than a GPU kernel could
// means some thread never arrives: a divergent barrier or shuffle, a deadlock on the device.
class Barrier {
 public:
  Barrier(int count, char const *what, unsigned index) : count_(count), what_(what), index_(index) {}

  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    unsigned const generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
      return;
    }
    if (!changed_.wait_for(lock, std::chrono::seconds(60), [&] { return generation != generation_; })) {
      std::fprintf(stderr, "bolt_host: %s %u: %d of %d threads arrived; the others never do\n", what_, index_,
                   arrived_, count_);
      std::abort();
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int const count_;
  int arrived_ = 0;
  unsigned generation_ = 0;
  char const *what_;
  unsigned const index_;
};

// One block's shared state: its barrier, one per warp for shuffles, the shuffle exchange and
// the dynamic shared memory.
struct Block {
  dim3 index;
  dim3 grid;
  unsigned threads;
  Barrier barrier;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<float> exchange;
  std::vector<float> shared;

  Block(dim3 index, dim3 grid, unsigned threads, size_t shared_bytes)
      : index(index), grid(grid), threads(threads), barrier(int(threads), "block barrier of block.x", index.x),
        exchange(threads), shared((shared_bytes + sizeof(float) - 1) / sizeof(float),
                                  std::numeric_limits<float>::quiet_NaN()) {
    for (unsigned w = 0; w * 32 < threads; ++w) {
      unsigned const lanes = threads - w * 32 < 32 ? threads - w * 32 : 32;
      warps.emplace_back(new Barrier(int(lanes), "shuffle of warp", w));
    }
  }
};

// What a kernel body asks of its thread: the same members as bolt_detail::DeviceThread.
struct Thread {
  Block *b;
  unsigned x;

  unsigned thread() const { return x; }
  dim3 block() const { return b->index; }
  dim3 grid() const { return b->grid; }
  unsigned threads() const { return b->threads; }
  void sync() const { b->barrier.wait(); }
  float *shared() const { return b->shared.data(); }

  // __shfl_xor_sync(0xffffffff, v, lane_mask): every lane of the warp takes part.
  float shfl_xor(float v, int lane_mask) const {
    if (b->threads % 32 != 0) {
      std::fprintf(stderr, "bolt_host: a full-warp shuffle in a block of %u threads\n", b->threads);
      std::abort();
    }
    Barrier &warp = *b->warps[x / 32];
    b->exchange[x] = v;
    warp.wait();
    float const w = b->exchange[(x & ~31u) | ((x % 32) ^ unsigned(lane_mask))];
    warp.wait();  // nobody overwrites its slot before every lane has read
    return w;
  }
};

// Runs `body(Thread)` for every thread of every block of the grid (1-D blocks).
template <class Body>
void launch(dim3 grid, unsigned threads, size_t shared_bytes, Body const &body) {
  if (threads < 1 || threads > 1024) {
    std::fprintf(stderr, "bolt_host: a launch of %u threads per block\n", threads);
    std::abort();
  }
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        Block block(dim3(x, y, z), grid, threads, shared_bytes);
        std::vector<std::thread> pool;
        pool.reserve(threads);
        for (unsigned t = 0; t < threads; ++t) {
          pool.emplace_back([&block, &body, t] { body(Thread{&block, t}); });
        }
        for (std::thread &t : pool) {
          t.join();
        }
      }
    }
  }
}

// An initialised operator's launch (its grid, block and shared memory), emulated.
template <class Operator>
void run(Operator const &op) {
  op.run_on([](dim3 grid, unsigned threads, size_t shared_bytes, auto const &body) {
    launch(grid, threads, shared_bytes, body);
  });
}

}  // namespace bolt_host

#endif  // BOLT_HOST_LAUNCH_H
