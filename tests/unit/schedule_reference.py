"""Reference learning rates from Debian's python3-torch (the same 1.13 as libaccel's LibTorch).

PyTorch's own schedulers (StepLR, ExponentialLR, OneCycleLR) run as they are. The Hugging Face
schedules are LambdaLR with the multipliers transformers defines, so PyTorch's stepping machinery
(the rate at construction, one multiplier per step) is the reference for those too.
Prints one line per value: "<case> <step> <lr> <momentum or nan>".
"""
import math

import torch


def hf(kind, warmup, total, **kw):
    def f(step):
        if kind == "constant":
            return 1.0
        if step < warmup:
            return float(step) / float(max(1, warmup))
        if kind == "constant_with_warmup":
            return 1.0
        if kind == "linear":
            return max(0.0, float(total - step) / float(max(1, total - warmup)))
        progress = float(step - warmup) / float(max(1, total - warmup))
        if kind == "cosine":
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(kw["num_cycles"]) * 2.0 * progress)))
        if kind == "cosine_with_restarts":
            if progress >= 1.0:
                return 0.0
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(kw["num_cycles"]) * progress) % 1.0))))
        if kind == "polynomial":
            lr_init, lr_end, power = kw["lr_init"], kw["lr_end"], kw["power"]
            if step > total:
                return lr_end / lr_init
            remaining = 1 - (step - warmup) / (total - warmup)
            return ((lr_init - lr_end) * remaining**power + lr_end) / lr_init
        raise ValueError(kind)
    return f


def run(case, make, steps, base_lr=0.1, optim="sgd"):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = (torch.optim.SGD([p], lr=base_lr, momentum=0.9) if optim == "sgd"
           else torch.optim.AdamW([p], lr=base_lr))
    sched = make(opt)
    for step in range(steps + 1):
        group = opt.param_groups[0]
        mom = group.get("momentum", group.get("betas", (float("nan"),))[0])
        print(case, step, repr(group["lr"]), repr(mom))
        if step < steps:
            opt.step()
            sched.step()


L = torch.optim.lr_scheduler
run("constant", lambda o: L.LambdaLR(o, hf("constant", 0, 0)), 5)
run("constant_with_warmup", lambda o: L.LambdaLR(o, hf("constant_with_warmup", 4, 0)), 8)
run("linear", lambda o: L.LambdaLR(o, hf("linear", 3, 20)), 24)
run("cosine", lambda o: L.LambdaLR(o, hf("cosine", 3, 20, num_cycles=0.5)), 24)
run("cosine_with_restarts", lambda o: L.LambdaLR(o, hf("cosine_with_restarts", 2, 20, num_cycles=3)), 24)
run("polynomial", lambda o: L.LambdaLR(o, hf("polynomial", 2, 15, lr_init=0.1, lr_end=1e-3, power=2.0)), 20)
run("step", lambda o: L.StepLR(o, step_size=3, gamma=0.5), 12)
run("exponential", lambda o: L.ExponentialLR(o, gamma=0.9), 10)
run("one_cycle", lambda o: L.OneCycleLR(o, max_lr=0.5, total_steps=20), 20)
run("one_cycle_linear_adamw", lambda o: L.OneCycleLR(o, max_lr=0.01, total_steps=15, pct_start=0.4,
                                                      anneal_strategy="linear"), 15, optim="adamw")
