#include "capi/family.hpp"

#include "common/error.hpp"
#include "data/dataset.hpp"

namespace accel::capi {

namespace {

thread_local int locked_callback_depth = 0;

// Locks the family that `member` has been joined to, following the joins. The link is read under
// the lock it hangs from, so a join that happens while this thread waits is seen.
std::shared_ptr<Family> lock_root(std::shared_ptr<Family> f) {
  for (;;) {
    f->mutex.lock();
    std::shared_ptr<Family> next = f->joined;
    if (!next) return f;
    f->mutex.unlock();
    f = std::move(next);
  }
}

}  // namespace

FamilyLock::FamilyLock(const std::shared_ptr<Family>& member) {
  if (data::in_sample_callback())
    fail(Errc::state,
         "called from inside a dataset's sample callback: a sample callback may not call "
         "functions of an accelerator, model, optimizer or scheduler");
  if (locked_callback_depth > 0)
    fail(Errc::state,
         "called from inside a callback that runs while a model's functions are busy (the name "
         "map of accel_load_pretrained_mapped): it may not call functions of an accelerator, "
         "model, optimizer or scheduler");
  held_ = lock_root(member);
}

FamilyLock::~FamilyLock() {
  held_->mutex.unlock();
}

LockedCallbackScope::LockedCallbackScope() {
  ++locked_callback_depth;
}

LockedCallbackScope::~LockedCallbackScope() {
  --locked_callback_depth;
}

void FamilyLock::join(const std::shared_ptr<Family>& other) {
  std::shared_ptr<Family> root = lock_root(other);
  if (root != held_) root->joined = held_;
  root->mutex.unlock();
}

}  // namespace accel::capi
