"""The Trainer's callback events against transformers 4.40.2's own Trainer (the venv's, on
Debian's torch 1.13), run for the same settings, sizes and accumulation: the same events in the
same order at the same global steps. transformers 4.40 has no on_pre_optimizer_step and
on_optimizer_step (later versions raise them after clipping and after the step), so ours are
compared without them. Also checks tests/mp/trainer_events.txt, the sequence the bindings'
tests expect, is still what the C program gives.

Usage: transformers_trainer_events.py ACCEL_CLI TRAINER_PROGRAM EXPECTED_FILE
"""
import os
import subprocess
import sys
import tempfile
import types

PYTHON = os.environ.get("ACCEL_TEST_ACCELERATE_PYTHON", "")

# (accumulation, settings, train samples, eval samples); batch size 4 everywhere. Epochs whose
# batches do not divide by the accumulation are left out: 4.40 counts accumulation windows
# across epochs (total_batched_samples), which later versions and libaccel do not.
CASES = [
    (2, "num_train_epochs=2,logging_steps=2,logging_first_step=true,eval_strategy=steps,"
        "eval_steps=3,save_strategy=steps,save_steps=3,save_total_limit=2", 24, 10),
    (1, "num_train_epochs=3,logging_strategy=epoch,eval_strategy=epoch,save_strategy=epoch", 20, 7),
    (3, "max_steps=5,logging_steps=1,eval_strategy=steps,eval_steps=2,eval_delay=3,"
        "save_strategy=no", 24, 9),
    (2, "max_steps=7,logging_steps=3,eval_strategy=steps,eval_steps=2,save_strategy=steps,"
        "save_steps=4,load_best_model_at_end=true,metric_for_best_model=loss,save_total_limit=1",
     16, 5),
]

REFERENCE = r'''
import sys, types
import torch, torch.distributed
_m = types.ModuleType("torch.distributed._tensor"); _m.DTensor = type("DTensor", (), {})
sys.modules["torch.distributed._tensor"] = _m  # Accelerate 1.15 imports it; torch 1.13 lacks it
import json
from transformers import Trainer, TrainingArguments, TrainerCallback
accumulation, settings, train_n, eval_n, out_dir = json.loads(sys.argv[1])
class M(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.fc = torch.nn.Linear(8, 4)
    def forward(s, x, labels=None):
        logits = s.fc(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}
class DS(torch.utils.data.Dataset):
    def __init__(s, n): s.n = n
    def __len__(s): return s.n
    def __getitem__(s, i): return {"x": torch.full((8,), float(i % 5)), "labels": torch.tensor(i % 4)}
names = ["on_init_end", "on_train_begin", "on_epoch_begin", "on_step_begin", "on_substep_end",
         "on_step_end", "on_log", "on_evaluate", "on_save", "on_epoch_end", "on_train_end",
         "on_predict", "on_prediction_step"]
seen = []
class Rec(TrainerCallback):
    pass
for n in names:
    setattr(Rec, n, lambda self, args, state, control, _n=n, **kw: seen.append(f"{_n} {state.global_step}"))
kw = {}
for item in settings.split(","):
    k, v = item.split("=")
    k = {"eval_strategy": "evaluation_strategy"}.get(k, k)
    kw[k] = {"true": True, "false": False}.get(v, v)
    for cast in (int, float):
        try:
            kw[k] = cast(v); break
        except ValueError:
            pass
args = TrainingArguments(output_dir=out_dir, per_device_train_batch_size=4,
                         per_device_eval_batch_size=4, gradient_accumulation_steps=accumulation,
                         report_to=[], disable_tqdm=True, use_cpu=True, **kw)
t = Trainer(model=M(), args=args, train_dataset=DS(train_n), eval_dataset=DS(eval_n),
            callbacks=[Rec()])
t.train(); t.evaluate(); t.predict(DS(eval_n))
print("\n".join(seen))
'''


def main():
    cli, program, expected = sys.argv[1:4]
    if not PYTHON or not os.path.exists(PYTHON):
        print("SKIP: the venv's python (transformers 4.40.2) is not there: run tools/setup.sh")
        return 77
    failures = 0
    for i, (accumulation, settings, train_n, eval_n) in enumerate(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            import json
            ref = subprocess.run([PYTHON, "-c", REFERENCE,
                                  json.dumps([accumulation, settings, train_n, eval_n, tmp + "/hf"])],
                                 capture_output=True, text=True)
            if ref.returncode != 0:
                print(f"case {i}: transformers failed:\n{ref.stderr[-3000:]}")
                return 1
            theirs = [l for l in ref.stdout.splitlines() if l.startswith("on_")]
            ours_run = subprocess.run([cli, "launch", "-n", "1", program, "events", tmp,
                                       str(accumulation), settings, str(train_n), str(eval_n)],
                                      capture_output=True, text=True)
            if ours_run.returncode != 0:
                print(f"case {i}: trainer_program failed:\n{ours_run.stderr[-3000:]}")
                return 1
            ours_all = [l for l in ours_run.stdout.splitlines() if l.startswith("on_")]
            ours = [l for l in ours_all if "optimizer_step" not in l]
            if ours != theirs:
                failures += 1
                k = next((j for j, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                         min(len(ours), len(theirs)))
                print(f"case {i} ({settings}): events differ at {k}: ours {ours[k:k+4]}, "
                      f"transformers' {theirs[k:k+4]} ({len(ours)} vs {len(theirs)} events)")
            else:
                print(f"case {i}: {len(theirs)} events equal ({len(ours_all)} with the optimizer "
                      f"steps)")
            if i == 0:
                with open(expected) as f:
                    if f.read().splitlines() != ours_all:
                        failures += 1
                        print(f"{expected} is not what the C program gives for case 0")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
