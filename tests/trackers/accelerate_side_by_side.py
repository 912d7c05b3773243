#!/usr/bin/env python3
"""One sequence of tracker calls written by Accelerate's TensorBoardTracker (the venv's 1.15.0,
through torch.utils.tensorboard; 1.2.1, the reference before issue 50, wrote the same) and by
libaccel (tracker_replay on two processes), both read back by TensorBoard's own EventAccumulator
and compared:

    accelerate_side_by_side.py ACCEL_CLI TRACKER_REPLAY

Compared: the scalar tags, each tag's steps in order, its values as float32 (NaN as NaN,
infinities as such; each side also against the logged values), the text tags with their steps
and tensors, every other kind of tag (none on either side), and the hyperparameters. libaccel
writes only on the main process: one event file.

Expected differences, not failures (everything else must match):
  - Accelerate records the configuration with SummaryWriter.add_hparams: the hparams plugin's
    summaries in an event file of its own in a subdirectory named by time.time()
    (logging_dir/proj/<t1>/), and hparams.yml in another such subdirectory
    (logging_dir/proj/<t2>/hparams.yml). libaccel writes the configuration as a Markdown text
    summary tagged "hparams" (so "hparams/text_summary", step 0) in the run's own event file, and
    hparams.yml beside it (logging_dir/proj/hparams.yml). Compared instead: the hparams plugin's
    session_start_info against the Markdown table, key by key, and both hparams.yml files loaded
    by yaml.safe_load.
  - accel_values has numbers and texts, no booleans: the program passes a bool as 1 or 0. The
    yaml comparison expects 1/0 where Accelerate's file has true/false; torch 1.13's add_hparams
    stores bools as numbers (1.0/0.0) too, so the plugin comparison needs no exception.
  - Wall times and event file names (time, pid) differ; not compared.

Needs ACCEL_TEST_ACCELERATE_PYTHON, a Python with accelerate, tensorboard and yaml (tools/setup.sh
makes build/accelerate-venv); exits 77 (skipped) without it, saying so. It runs itself again
under that Python.
"""
import glob
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tracker_readers import SKIPPED, accumulator, f32, python_with, rerun  # noqa: E402

PROJECT = "proj"

# Ints, floats (one that %g writes with an exponent), strings and bools.
CONFIG = {
    "lr": 0.001,
    "weight_decay": 1e-05,
    "batch_size": 64,
    "epochs": 3,
    "dropout": 0.25,
    "model": "cnn",
    "optimizer": "adamw",
    "use_amp": True,
    "shuffle": False,
}


def calls():
    """The (values, step) sequence both sides log; step None is Accelerate's default."""
    out = []
    for s in range(20):
        values = {"loss": 2.0 * 0.9 ** s + 1.0 / 3.0, "lr": 1e-3 * (1 - s / 20.0),
                  "accuracy": s / 20.0, "epoch": s // 5, "tokens": 123456789 * s}
        if s == 7:
            values["note"] = "warm-up done, ok \u2014 \u00fc"
        out.append((values, s))
    out.append(({"accuracy": 0.99}, 10))  # a step logged twice
    # Non-finite values, a float32 denormal and doubles beyond float32's range.
    out.append(({"loss": math.nan, "grad_norm": math.inf, "lr": -math.inf, "tiny": 1e-40,
                 "huge": 1e39, "neg_huge": -1e39}, 20))
    out.append(({"loss": 0.125, "summary": "no step given"}, None))
    out.append(({"late": 0.5}, 3_000_000_000))  # beyond int32
    return out


def number_text(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    return repr(v)  # shortest round-trip text; nan, inf, -inf as strtod reads them


def fields(values):
    out = []
    for k, v in values.items():
        out += [k, "t", v] if isinstance(v, str) else [k, "n", number_text(v)]
    return out


def replay_script():
    lines = ["\t".join(["config"] + fields(CONFIG)), "init\t" + PROJECT]
    for values, step in calls():
        lines.append("\t".join(["log", str(-1 if step is None else step)] + fields(values)))
    lines.append("end")
    return "\n".join(lines) + "\n"


def write_with_accelerate(project_dir):
    import accelerate

    acc = accelerate.Accelerator(log_with="tensorboard", project_dir=project_dir)
    acc.init_trackers(PROJECT, config=dict(CONFIG))
    for values, step in calls():
        acc.log(dict(values), step=step)
    acc.end_training()


class Problems:
    def __init__(self):
        self.items = []

    def expect(self, ok, what):
        if not ok:
            self.items.append(what)
        return ok


def key(v):
    return "nan" if math.isnan(v) else v


def expected_series():
    """Per tag the (step, value) list TensorBoard should hold: a missing step reads as 0."""
    scalars, texts = {}, {}
    for values, step in calls():
        s = 0 if step is None else step
        for k, v in values.items():
            if isinstance(v, str):
                texts.setdefault(k + "/text_summary", []).append((s, [v.encode()]))
            else:
                scalars.setdefault(k, []).append((s, key(f32(float(v)))))
    return scalars, texts


def event_files(path):
    return sorted(n for n in os.listdir(path) if n.startswith("events.out.tfevents."))


def compare(d1, d2, p):
    import yaml
    from tensorboard.plugins.hparams import plugin_data_pb2

    a_dir, l_dir = os.path.join(d1, PROJECT), os.path.join(d2, PROJECT)
    p.expect(len(event_files(a_dir)) == 1, "Accelerate: event files %s" % event_files(a_dir))
    p.expect(len(event_files(l_dir)) == 1,
             "libaccel: one event file (the main process's) expected: %s" % event_files(l_dir))
    a, l = accumulator(a_dir), accumulator(l_dir)
    a_tags, l_tags = a.Tags(), l.Tags()
    want_scalars, want_texts = expected_series()

    # Scalars: tags, steps in order, float32 values; each side against the logged sequence too.
    p.expect(sorted(a_tags["scalars"]) == sorted(want_scalars),
             "Accelerate's scalar tags %s, logged %s" % (a_tags["scalars"], sorted(want_scalars)))
    p.expect(sorted(l_tags["scalars"]) == sorted(a_tags["scalars"]),
             "scalar tags: libaccel %s, Accelerate %s" % (sorted(l_tags["scalars"]),
                                                          sorted(a_tags["scalars"])))
    for tag in sorted(set(a_tags["scalars"]) | set(l_tags["scalars"])):
        series = {}
        for name, side, tags in (("Accelerate", a, a_tags), ("libaccel", l, l_tags)):
            if tag in tags["scalars"]:
                series[name] = [(e.step, key(e.value)) for e in side.Scalars(tag)]
        if len(series) < 2:
            continue
        p.expect([s for s, _ in series["libaccel"]] == [s for s, _ in series["Accelerate"]],
                 "scalar %s steps: libaccel %s, Accelerate %s" % (
                     tag, [s for s, _ in series["libaccel"]], [s for s, _ in series["Accelerate"]]))
        p.expect(series["libaccel"] == series["Accelerate"],
                 "scalar %s: libaccel %s, Accelerate %s" % (tag, series["libaccel"],
                                                            series["Accelerate"]))
        p.expect(series["Accelerate"] == want_scalars.get(tag),
                 "scalar %s: Accelerate %s, logged %s" % (tag, series["Accelerate"],
                                                          want_scalars.get(tag)))

    # Texts: the same tags but libaccel's "hparams/text_summary" (see the docstring); steps,
    # tensors (dtype, shape, string_val) and the plugin name equal.
    p.expect("hparams/text_summary" in l_tags["tensors"], "libaccel wrote no hparams text summary")
    l_texts = sorted(t for t in l_tags["tensors"] if t != "hparams/text_summary")
    p.expect(sorted(a_tags["tensors"]) == sorted(want_texts),
             "Accelerate's text tags %s, logged %s" % (a_tags["tensors"], sorted(want_texts)))
    p.expect(l_texts == sorted(a_tags["tensors"]),
             "text tags: libaccel %s, Accelerate %s" % (l_texts, sorted(a_tags["tensors"])))
    for tag in sorted(set(l_texts) & set(a_tags["tensors"])):
        ae, le = a.Tensors(tag), l.Tensors(tag)
        p.expect([(e.step, list(e.tensor_proto.string_val)) for e in ae] == want_texts[tag],
                 "text %s: Accelerate %s, logged %s" % (tag, ae, want_texts[tag]))
        p.expect([(e.step, e.tensor_proto) for e in le] == [(e.step, e.tensor_proto) for e in ae],
                 "text %s: libaccel %s, Accelerate %s" % (tag, le, ae))
        p.expect(l.SummaryMetadata(tag).plugin_data.plugin_name ==
                 a.SummaryMetadata(tag).plugin_data.plugin_name == "text",
                 "text %s: plugin libaccel %s, Accelerate %s" % (
                     tag, l.SummaryMetadata(tag), a.SummaryMetadata(tag)))
    for kind in sorted(set(a_tags) | set(l_tags)):
        if kind not in ("scalars", "tensors"):
            p.expect(l_tags.get(kind) == a_tags.get(kind),
                     "%s: libaccel %s, Accelerate %s" % (kind, l_tags.get(kind), a_tags.get(kind)))

    # Hyperparameters: Accelerate's hparams plugin against libaccel's Markdown table.
    hp_dirs = sorted({os.path.dirname(f) for f in glob.glob(os.path.join(a_dir, "*", "events.*"))})
    if p.expect(len(hp_dirs) == 1, "Accelerate's add_hparams directories: %s" % hp_dirs):
        content = accumulator(hp_dirs[0]).PluginTagToContent("hparams")
        start = plugin_data_pb2.HParamsPluginData.FromString(
            content["_hparams_/session_start_info"]).session_start_info.hparams
        table = l.Tensors("hparams/text_summary") if "hparams/text_summary" in l_tags[
            "tensors"] else []
        p.expect(len(table) == 1 and table[0].step == 0, "libaccel's hparams summary: %s" % table)
        rows = {}
        for line in table[0].tensor_proto.string_val[0].decode().splitlines()[2:] if table else []:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1]
        p.expect(sorted(rows) == sorted(start) == sorted(CONFIG),
                 "hparams keys: libaccel's table %s, Accelerate's plugin %s" % (
                     sorted(rows), sorted(start)))
        for k in sorted(set(rows) & set(start)):
            v = start[k]
            same = (float(rows[k]) == v.number_value if v.WhichOneof("kind") == "number_value"
                    else rows[k] == v.string_value)
            p.expect(same, "hparam %s: libaccel's table %r, Accelerate's plugin %s" % (
                k, rows[k], v))

    # hparams.yml: both load to the configuration (bools as 1/0 on libaccel's side), types
    # included: an int stays an int, a float a float, a string a string.
    def typed(d):
        return {k: (type(v).__name__, v) for k, v in d.items()} if isinstance(d, dict) else d

    a_yml = glob.glob(os.path.join(a_dir, "*", "hparams.yml"))
    l_yml = os.path.join(l_dir, "hparams.yml")
    if p.expect(len(a_yml) == 1, "Accelerate's hparams.yml: %s" % a_yml):
        got = yaml.safe_load(open(a_yml[0]))
        p.expect(typed(got) == typed(CONFIG), "Accelerate's hparams.yml %r" % got)
    if p.expect(os.path.isfile(l_yml), "libaccel wrote no %s" % l_yml):
        got = yaml.safe_load(open(l_yml))
        want = {k: int(v) if isinstance(v, bool) else v for k, v in CONFIG.items()}
        p.expect(typed(got) == typed(want),
                 "libaccel's hparams.yml loads as %s, expected %s (file:\n%s)" % (
                     typed(got), typed(want), open(l_yml).read()))
    return a, l


def child(cli, replay):
    p = Problems()
    with tempfile.TemporaryDirectory() as tmp:
        d1, d2 = os.path.join(tmp, "accelerate"), os.path.join(tmp, "libaccel")
        script = os.path.join(tmp, "calls.tsv")
        with open(script, "w") as f:
            f.write(replay_script())
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_LOG")}
        env.update(ACCEL_LOG_WITH="tensorboard", ACCEL_PROJECT_DIR=d2)
        # libaccel's two processes run while Accelerate writes here: the two cores overlap.
        run = subprocess.Popen([cli, "launch", "-n", "2", replay, script], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        write_with_accelerate(d1)
        out, _ = run.communicate(timeout=120)
        if run.returncode != 0:
            sys.stdout.write(out)
            print("accelerate_side_by_side: libaccel's run failed (%d)" % run.returncode)
            return 1
        a, l = compare(d1, d2, p)
        n_scalars = sum(len(a.Scalars(t)) for t in a.Tags()["scalars"])
    if p.items:
        print("accelerate_side_by_side: libaccel differs from Accelerate %s:" %
              __import__("accelerate").__version__)
        for item in p.items:
            print("  - " + item)
        return 1
    print("accelerate_side_by_side: %d scalar events, texts and hyperparameters the same as "
          "Accelerate %s's" % (n_scalars, __import__("accelerate").__version__))
    return 0


def main():
    cli, replay = sys.argv[1], sys.argv[2]
    if os.environ.get("SIDE_BY_SIDE_CHILD"):
        return child(cli, replay)
    python = python_with(["accelerate", "tensorboard", "yaml", "torch.utils.tensorboard"])
    if python is None:
        return SKIPPED
    return rerun(python, __file__, "SIDE_BY_SIDE_CHILD", [cli, replay])


if __name__ == "__main__":
    sys.exit(main())
