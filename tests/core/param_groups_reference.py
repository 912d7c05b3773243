"""Reference values for optimizer parameter groups from Debian's python3-torch (the same 1.13 as
libaccel's LibTorch): torch.optim's optimizers with param groups, and its schedulers over them.

Three parameters w (3x4), b (3) and h (2) start from fixed values and get fixed gradients at each
step (param_groups_test.cpp computes the same floats). Prints one line per result:
"<case> <name> <value> <value> ...": a parameter after the steps (p0, p1, p2), or a group's
learning rate (lr0, lr1) and momentum (m0, m1) at construction and after each scheduler step.
"""
import math

import torch

STEPS = 5


def params():
    w = torch.tensor([math.sin(0.1 * i) for i in range(12)], dtype=torch.float32).view(3, 4)
    b = torch.tensor([math.cos(0.2 * i) for i in range(3)], dtype=torch.float32)
    h = torch.tensor([0.5 * i - 0.3 for i in range(2)], dtype=torch.float32)
    return [t.clone().requires_grad_() for t in (w, b, h)]


def set_grads(ps, k):
    for j, p in enumerate(ps):
        values = [math.sin(0.3 * i + k + 0.7 * j) * 0.5 for i in range(p.numel())]
        p.grad = torch.tensor(values, dtype=torch.float32).view_as(p)


def out(case, name, values):
    print(case, name, " ".join(repr(float(v)) for v in values))


def run(case, make, schedule=None, momentum=None):
    w, b, h = ps = params()
    opt = make(w, b, h)
    sched = schedule(opt) if schedule else None
    def mom(group):
        return group["betas"][0] if momentum == "betas" else group[momentum]

    lrs = [[g["lr"]] for g in opt.param_groups]
    moms = [[mom(g)] if momentum else [] for g in opt.param_groups]
    for k in range(STEPS):
        set_grads(ps, k)
        opt.step()
        if sched:
            sched.step()
        for g, group in enumerate(opt.param_groups):
            lrs[g].append(group["lr"])
            if momentum:
                moms[g].append(mom(group))
    for j, p in enumerate(ps):
        out(case, "p%d" % j, p.detach().flatten().tolist())
    for g in range(len(lrs)):
        out(case, "lr%d" % g, lrs[g])
        if momentum:
            out(case, "m%d" % g, moms[g])


def warmup_linear(warmup, total):
    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        return max(0.0, float(total - step) / float(max(1, total - warmup)))
    return f


def polynomial(opt, warmup, total, lr_end, power):
    # transformers' get_polynomial_decay_schedule_with_warmup: a factor of the optimizer's lr.
    lr_init = opt.defaults["lr"]

    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        if step > total:
            return lr_end / lr_init
        remaining = 1 - (step - warmup) / (total - warmup)
        return ((lr_init - lr_end) * remaining ** power + lr_end) / lr_init
    return torch.optim.lr_scheduler.LambdaLR(opt, f)


O = torch.optim
run("adamw", lambda w, b, h: O.AdamW([{"params": [w]}, {"params": [b, h], "weight_decay": 0.0}],
                                     lr=0.01, weight_decay=0.01))
run("sgd", lambda w, b, h: O.SGD([{"params": [w, b]},
                                  {"params": [h], "lr": 0.01, "momentum": 0.5,
                                   "weight_decay": 0.1}], lr=0.1, momentum=0.9, dampening=0.1))
run("adam", lambda w, b, h: O.Adam([{"params": [w, h]},
                                    {"params": [b], "betas": (0.8, 0.99), "eps": 1e-6,
                                     "amsgrad": True}], lr=0.02))
run("rmsprop", lambda w, b, h: O.RMSprop([{"params": [w]},
                                          {"params": [b, h], "alpha": 0.9, "momentum": 0.5,
                                           "centered": True, "lr": 0.005}], lr=0.01))
run("adagrad", lambda w, b, h: O.Adagrad([{"params": [w, b]},
                                          {"params": [h], "lr_decay": 0.01, "weight_decay": 0.05,
                                           "lr": 0.1}], lr=0.05, initial_accumulator_value=0.1))


def two_sgd_groups(w, b, h):
    return O.SGD([{"params": [w, b]}, {"params": [h], "lr": 0.02}], lr=0.1, momentum=0.9)


run("warmup", two_sgd_groups, lambda o: O.lr_scheduler.LambdaLR(o, warmup_linear(2, 6)))
run("polynomial", two_sgd_groups, lambda o: polynomial(o, 1, 6, 0.001, 2.0))
run("step", two_sgd_groups, lambda o: O.lr_scheduler.StepLR(o, step_size=2, gamma=0.5))
run("onecycle", two_sgd_groups,
    lambda o: O.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=6), momentum="momentum")
run("onecycle_adamw",
    lambda w, b, h: O.AdamW([{"params": [w]}, {"params": [b, h], "weight_decay": 0.0,
                                               "lr": 0.003}], lr=0.01),
    lambda o: O.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=6), momentum="betas")
