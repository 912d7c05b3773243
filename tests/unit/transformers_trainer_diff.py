"""libaccel's Trainer rules (src/trainer) against transformers 4.40.2's own (the test venv's, on
Debian's torch 1.13): random runs through the Trainer's loop, where transformers' side uses its
TrainingArguments (__post_init__'s checks), CallbackHandler with DefaultFlowCallback and
EarlyStoppingCallback, TrainerState, and Trainer's own _maybe_log_save_evaluate, log,
_save_checkpoint, _sorted_checkpoints and _rotate_checkpoints, called on a minimal object (they
only read what it has); checkpoints are real directories in a temporary folder and the
trainer_state.json transformers writes at each save is compared byte for byte with ours. The
loop itself is _inner_training_loop's step/epoch skeleton, transcribed here and in trainer_probe.
Then random rotations over odd directory names (checkpoint-05, checkpoint-7b, plain files).

    python3 transformers_trainer_diff.py TRAINER_PROBE     (exits 77 without the venv)
"""
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tracker_readers import SKIPPED, python_with, rerun  # noqa: E402

RUNS = 300
ROTATIONS = 300


def transformers_side(probe):
    import logging
    import warnings

    import torch
    import transformers
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_callback import (CallbackHandler, DefaultFlowCallback,
                                               EarlyStoppingCallback, TrainerControl, TrainerState)
    from transformers.trainer_utils import get_last_checkpoint

    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    assert transformers.__version__ == "4.40.2", transformers.__version__

    class Fake:
        """The Trainer methods under test, on just what they read."""
        _maybe_log_save_evaluate = Trainer._maybe_log_save_evaluate
        _save_checkpoint = Trainer._save_checkpoint
        _sorted_checkpoints = Trainer._sorted_checkpoints
        _rotate_checkpoints = Trainer._rotate_checkpoints
        log = Trainer.log
        hp_search_backend = None
        lr_scheduler = None

        def store_flos(self):
            pass

        def _nested_gather(self, t):
            return t

        def _get_learning_rate(self):
            return self.lr

        def _report_to_hp_search(self, *a):
            pass

        def _get_output_dir(self, trial):
            return self.args.output_dir

        def save_model(self, output_dir, _internal_call=False):
            os.makedirs(output_dir, exist_ok=True)

        def evaluate(self, ignore_keys=None):  # Trainer.evaluate's bookkeeping
            metrics = dict(self.metrics[self.evals % len(self.metrics)])
            self.evals += 1
            self.log(metrics)
            self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control,
                                                             metrics)
            return metrics

    def flags(c):
        return ("L" if c.should_log else "") + ("E" if c.should_evaluate else "") + \
               ("S" if c.should_save else "") + ("X" if c.should_training_stop else "")

    def run(case, tmp):
        kw = {("evaluation_strategy" if k == "eval_strategy" else k): v for k, v in case["py_args"].items()}
        patience = kw.pop("early_stopping_patience", 0)
        threshold = kw.pop("early_stopping_threshold", 0.0)
        out_dir = tempfile.mkdtemp(dir=tmp)
        try:
            args = TrainingArguments(output_dir=out_dir, save_only_model=True, report_to=[], **kw)
        except ValueError as e:
            return {"error": str(e)}, out_dir
        t = Fake()
        t.args, t.metrics, t.evals = args, case["metrics"], 0
        callbacks = [DefaultFlowCallback()]
        if patience:
            callbacks.append(EarlyStoppingCallback(patience, threshold))
        t.callback_handler = CallbackHandler(callbacks, None, None, None, None)
        out = {"events": [], "states": [], "deleted": []}
        # _inner_training_loop's set-up.
        batches, accum = case["batches"], args.gradient_accumulation_steps
        per_epoch = max(batches // accum, 1)
        if args.max_steps > 0:
            max_steps = args.max_steps
            epochs = args.max_steps // per_epoch + int(args.max_steps % per_epoch > 0)
        else:
            max_steps = math.ceil(args.num_train_epochs * per_epoch)
            epochs = math.ceil(args.num_train_epochs)
        t.state = TrainerState()
        t.state.is_hyper_param_search = False
        t.state.train_batch_size = case["train_batch_size"]
        for name in ("logging_steps", "eval_steps", "save_steps"):
            v = getattr(args, name)
            if v is not None:
                setattr(t.state, name, math.ceil(max_steps * v) if v < 1 else v)
        t.state.max_steps, t.state.num_train_epochs = max_steps, epochs
        t.control = TrainerControl()
        t.control = t.callback_handler.on_train_begin(args, t.state, t.control)
        t.state.epoch = 0
        t._globalstep_last_logged, t._total_loss_scalar = 0, 0.0
        tr_loss = torch.tensor(0.0)
        total, k = 0, 0
        before = set()
        for epoch in range(epochs):
            t.control = t.callback_handler.on_epoch_begin(args, t.state, t.control)
            for step in range(batches):
                total += 1
                if step % accum == 0:
                    t.control = t.callback_handler.on_step_begin(args, t.state, t.control)
                tr_loss += torch.tensor(case["losses"][k % len(case["losses"])], dtype=torch.float32)
                grad_norm = case["grad_norms"][k % len(case["grad_norms"])]
                t.lr = case["lrs"][k % len(case["lrs"])]
                k += 1
                if total % accum == 0 or (batches <= accum and step + 1 == batches):
                    t.state.global_step += 1
                    t.state.epoch = epoch + (step + 1) / batches
                    t.control = t.callback_handler.on_step_end(args, t.state, t.control)
                    out["events"].append("s%d:%s" % (t.state.global_step, flags(t.control)))
                    before = observe(t, out, out_dir, before, tr_loss, grad_norm)
                if t.control.should_epoch_stop or t.control.should_training_stop:
                    break
            t.control = t.callback_handler.on_epoch_end(args, t.state, t.control)
            out["events"].append("e%d:%s" % (epoch, flags(t.control)))
            t.lr = case["lrs"][0]
            before = observe(t, out, out_dir, before, tr_loss, case["grad_norms"][0])
            if t.control.should_training_stop:
                break
        # The end of training's save_total_limit=1 sweep.
        end = []
        if t.state.best_model_checkpoint is not None and args.save_total_limit == 1:
            for c in t._sorted_checkpoints(use_mtime=False, output_dir=out_dir):
                if not os.path.samefile(c, t.state.best_model_checkpoint):
                    end.append(os.path.basename(c))
        out["end_deleted"] = end
        path = os.path.join(out_dir, "final.json")
        t.state.save_to_json(path)
        with open(path) as f:
            out["final"] = f.read()
        return out, out_dir

    def observe(t, out, out_dir, before, tr_loss, grad_norm):
        """One _maybe_log_save_evaluate; a save's trainer_state.json and deletions recorded."""
        saving = t.control.should_save
        step = t.state.global_step
        t._maybe_log_save_evaluate(tr_loss, grad_norm, None, None, None, None)
        now = set(os.listdir(out_dir))
        if saving:
            with open(os.path.join(out_dir, "checkpoint-%d" % step, "trainer_state.json")) as f:
                out["states"].append(f.read())
            out["deleted"].append(sorted((before | {"checkpoint-%d" % step}) - now))
        return now

    def rotate(case, tmp):
        out_dir = tempfile.mkdtemp(dir=tmp)
        for name in case["names"]:
            p = os.path.join(out_dir, name)
            if name in case["files"]:
                open(p, "w").close()
            else:
                os.makedirs(p, exist_ok=True)
        t = Fake()
        t.args = type("A", (), {"output_dir": out_dir, "save_total_limit": case["limit"]})()
        t.state = TrainerState(best_model_checkpoint=None if case["best"] is None else out_dir + case["best"])
        end = []
        if t.state.best_model_checkpoint is not None and case["limit"] == 1:
            try:
                for c in t._sorted_checkpoints(use_mtime=False, output_dir=out_dir):
                    if not os.path.samefile(c, t.state.best_model_checkpoint):
                        end.append(c)
            except FileNotFoundError:  # a best that is gone: transformers crashes (PR #48319)
                end = None
        latest = get_last_checkpoint(out_dir)
        t._rotate_checkpoints(use_mtime=False, output_dir=out_dir)
        gone = sorted(set(case["names"]) - set(os.listdir(out_dir)))
        dirs = [n for n in case["names"] if n not in case["files"]]
        return {"kind": "rotate", "output_dir": out_dir, "dirs": dirs, "limit": case["limit"],
                "best": t.state.best_model_checkpoint}, \
            {"deleted": gone, "end_deleted": end, "latest": latest}

    rng = random.Random(52)
    cases, expected = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(RUNS):
            case = random_run(rng)
            want, out_dir = run(case, tmp)
            text = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in case["py_args"].items()}
            text["output_dir"] = out_dir
            cases.append({"kind": "run", "args": text, **{k: case[k] for k in
                          ("batches", "losses", "lrs", "metrics", "train_batch_size")},
                          # NaN and infinities (an fp16 overflow's norm) travel as repr()'s text
                          "grad_norms": [g if math.isfinite(g) else repr(g) for g in case["grad_norms"]]})
            expected.append(want)
        # trainer_state.json files transformers wrote, read by libaccel and written again.
        for want in list(expected):
            for text in want.get("states", [])[-1:] + ([want["final"]] if "final" in want else []):
                cases.append({"kind": "reread", "text": text})
                expected.append({"text": text})
        for _ in range(ROTATIONS):
            c, want = rotate(random_rotation(rng), tmp)
            cases.append(c)
            expected.append(want)
        got = subprocess.run([probe], input="".join(json.dumps(c) + "\n" for c in cases),
                             capture_output=True, text=True, check=True).stdout.splitlines()
    return compare(cases, expected, [json.loads(g) for g in got])


def random_run(rng):
    a = {}
    if rng.random() < 0.5:
        a["max_steps"] = rng.randint(1, 60)
    else:
        a["num_train_epochs"] = rng.choice([1, 2, 3, 0.5, 1.5, 2.25])
    a["logging_steps"] = rng.choice([1, 2, 3, 5, 7, 10, 0.1, 0.25, 0.5])
    if rng.random() < 0.3:
        a["logging_first_step"] = True
    if rng.random() < 0.15:
        a["logging_strategy"] = rng.choice(["epoch", "no"])
    a["eval_strategy"] = rng.choice(["no", "steps", "steps", "epoch"])
    if rng.random() < 0.6:
        a["eval_steps"] = rng.choice([1, 2, 3, 4, 5, 6, 8, 0.2, 0.25, 0.5])
    if rng.random() < 0.3:
        a["eval_delay"] = rng.choice([0, 1, 2, 5, 10])
    a["save_strategy"] = rng.choice(["no", "steps", "steps", "epoch"])
    a["save_steps"] = rng.choice([1, 2, 3, 4, 6, 8, 10, 12, 0.3, 0.5])
    if rng.random() < 0.6:
        a["save_total_limit"] = rng.choice([1, 1, 2, 3, 5])
    metric = rng.choice(["loss", "accuracy", "eval_f1", "eval_loss"])
    if rng.random() < 0.6:
        a["load_best_model_at_end"] = True
        if rng.random() < 0.8:  # mostly settings 4.40 accepts
            a["save_strategy"] = a["eval_strategy"] if a["eval_strategy"] != "no" else "steps"
            a["eval_strategy"] = a["save_strategy"]
            if "eval_steps" in a and a["eval_steps"] >= 1:
                a["save_steps"] = a["eval_steps"] * rng.choice([1, 2, 3])
        a["metric_for_best_model"] = metric
        if rng.random() < 0.2:
            a["greater_is_better"] = rng.random() < 0.5
        if a["eval_strategy"] != "no" and rng.random() < 0.6:
            a["early_stopping_patience"] = rng.randint(1, 4)
            a["early_stopping_threshold"] = rng.choice([0.0, 0.0, 0.01, 0.05])
    elif rng.random() < 0.3:
        a["metric_for_best_model"] = metric
    if rng.random() < 0.4:
        a["gradient_accumulation_steps"] = rng.choice([2, 3, 4])
    batches = rng.randint(1, 25)
    n = rng.randint(1, 40)
    key = "eval_" + metric if not metric.startswith("eval_") else metric
    values = []
    for _ in range(n):
        v = round(rng.uniform(0, 1), rng.choice([2, 3, 6]))
        if values and rng.random() < 0.3:
            v = values[-1]["m"] + rng.choice([0.005, -0.005, 0.02, -0.02, 0.0])
        values.append({"m": v})
    metrics = [{key: v["m"], "eval_runtime": 0.5, "eval_loss" if key != "eval_loss" else "eval_extra": 1.25}
               for v in values]
    losses = [struct.unpack("f", struct.pack("f", rng.uniform(0, 5)))[0]  # fp32 values
              for _ in range(rng.randint(1, 50))]
    return {"py_args": a, "batches": batches, "losses": losses,
            "grad_norms": [rng.choice([rng.uniform(0, 3)] * 12 + [math.nan, math.inf]) for _ in range(7)],
            "lrs": [rng.choice([5e-05, 1e-3, 0.1, 2e-05 * rng.random()]) for _ in range(5)],
            "metrics": metrics, "train_batch_size": rng.choice([8, 16, 32])}


def random_rotation(rng):
    steps = rng.sample(range(1, 200), rng.randint(0, 8))
    names = ["checkpoint-%d" % s for s in steps]
    extras = ["checkpoint-05", "checkpoint-7b", "checkpoint-x", "runs", "checkpoint-", "checkpoint-12"]
    names += rng.sample(extras, rng.randint(0, 3))
    names = list(dict.fromkeys(names))
    rng.shuffle(names)
    files = [n for n in names if rng.random() < 0.1]
    dirs = [n for n in names if n not in files]
    best = None
    r = rng.random()
    if r < 0.6 and dirs:
        best = "/" + rng.choice(dirs) + rng.choice(["", "", "/"])
    elif r < 0.7:
        best = "/checkpoint-999"
    return {"names": names, "files": files, "best": best, "limit": rng.choice([None, 0, 1, 1, 2, 3])}


def compare(cases, expected, got):
    if len(got) != len(expected):
        print("probe answered %d of %d cases" % (len(got), len(expected)))
        return 1
    bad, runs, saves, events, errors = 0, 0, 0, 0, 0
    for c, want, have in zip(cases, expected, got):
        if c["kind"] == "run":
            if "error" in want:
                errors += 1
            else:
                runs += 1
                saves += len(want["states"])
                events += len(want["events"])
        if c["kind"] == "run" and "deleted" in have:  # compared as sets of names
            have["deleted"] = [sorted(d) for d in have["deleted"]]
        if c["kind"] == "rotate":
            have["deleted"] = sorted(os.path.basename(p) for p in have["deleted"])
        if c["kind"] == "rotate" and want["end_deleted"] is None:
            del want["end_deleted"], have["end_deleted"]  # libaccel does not crash there
        if want != have:
            bad += 1
            if bad <= 3:
                print("MISMATCH on", json.dumps(c)[:1500])
                for k in sorted(set(want) | set(have)):
                    if want.get(k) != have.get(k):
                        print("  %s: transformers %r\n  %s: libaccel     %r" % (k, want.get(k), k, have.get(k)))
    rereads = sum(c["kind"] == "reread" for c in cases)
    odd = sum("NaN" in c["text"] or "Infinity" in c["text"] for c in cases if c["kind"] == "reread")
    print("%d runs (%d decisions, %d saves with their trainer_state.json), %d refused settings, "
          "%d of transformers' trainer_state.json read back (%d with NaN or Infinity), %d rotations: "
          "%d mismatches" % (runs, events, saves, errors, rereads, odd, ROTATIONS, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    if os.environ.get("ACCEL_TRAINER_DIFF_CHILD"):
        sys.exit(transformers_side(sys.argv[1]))
    python = python_with(["transformers", "torch"])
    if python is None:
        sys.exit(SKIPPED)
    sys.exit(rerun(python, os.path.abspath(__file__), "ACCEL_TRAINER_DIFF_CHILD", sys.argv[1:]))
