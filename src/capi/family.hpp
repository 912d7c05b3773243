// Training families (accel.h, "Threads"): the calls into one family are serialised by one lock.
// A model starts a family that its optimizers and schedulers share; accel_prepare joins that family
// to its accelerator's, after which every member locks the accelerator's mutex.
#pragma once

#include <memory>
#include <mutex>

namespace accel::capi {

struct Family {
  // Recursive: checkpoint callbacks run inside save_state's lock and may call into the family.
  std::recursive_mutex mutex;
  // The family this one was joined to; written once, under `mutex`. Members that still point here
  // follow it to the lock that now guards them.
  std::shared_ptr<Family> joined;
};

// Holds the lock of the family `member` belongs to now. Fails with accel::Error(state) on a
// thread inside a dataset's sample callback, whose dataloader call may be what the holder of this
// lock waits for.
class FamilyLock {
 public:
  explicit FamilyLock(const std::shared_ptr<Family>& member);
  ~FamilyLock();
  FamilyLock(const FamilyLock&) = delete;
  FamilyLock& operator=(const FamilyLock&) = delete;

  // Joins `other`'s family to the one held here, so its members lock this one from now on.
  void join(const std::shared_ptr<Family>& other);

 private:
  std::shared_ptr<Family> held_;
};

// Marks this thread, while it lives, as inside a program callback that runs under a family lock
// (accel_load_pretrained_mapped's name map): a FamilyLock taken there fails with
// accel::Error(state) instead of waiting for the lock its own thread holds.
class LockedCallbackScope {
 public:
  LockedCallbackScope();
  ~LockedCallbackScope();
  LockedCallbackScope(const LockedCallbackScope&) = delete;
  LockedCallbackScope& operator=(const LockedCallbackScope&) = delete;
};

}  // namespace accel::capi
