"""Screening variants of ER-FB on the planner's demonstrations, against ER-FB itself.

    python benchmarks/er_variants.py --tasks walker:walk walker:stand --seeds 2 \
        --variants er rer late cer1 cer0.5
    python benchmarks/er_variants.py --tasks cheetah:walk --seeds 5 \
        --model cheetah=cheetah:rnd-v1 --dataset cheetah=datasets/exorl \
        --variants er rer rer-log wer stored
    python benchmarks/er_variants.py --table --variants er rer rer-log wer

The reference sample rho' is, per domain, either 100,000 states drawn uniformly from a
dataset given with `--dataset DOMAIN=PATH` (the model's training distribution when the
dataset is the one it was trained on, or a collection of the same explorer), or else the
model's own reachable states: pi_z for 64 z drawn uniformly on the sqrt(d) sphere (the
prior the actor was trained on; no reward and no demonstration read), one episode each at
nominal physics, initial states of seed 12345. Walker's default's training states cannot
be collected again here (its explorer makes ~25 episodes an hour); the `cpu` explorer's can.

- `er`: z = mean of B over the demonstrated states (`rbfm.inference.er`).
- `rer`: RER-style, the density ratio learned: an MLP (d -> 256 -> 256 -> 1) on B(s)
  classifies demonstrated states against rho' (balanced batches of 256, AdamW lr 1e-3,
  weight decay 1e-4, 2,000 steps, seeded by the seed); r(s) = exp(logit), so
  z = sum_rho' r B / sum_rho' r, projected.
- `rer-log`: the same classifier's logit as the reward (log d_E / rho', GAIL's), so
  z = mean_rho' logit B, projected: no weight concentrates on a few states.
- `lrer`, `lrer-log`: the log ratio restricted to B's span, a logistic regression on
  B(s) whose L2 weight is chosen by held-out log-loss (never by return); z from its odds
  over rho', or from its centred logit (`linear_rer`).
- `wer`: the least-squares weights of the reward d_E / rho' in B's span,
  E_rho'[B B^T]^{-1} mean_demos B, taken as the task vector and projected (ER-FB's z is
  FB's zero-shot z of that fitted reward; the two agree where E_rho'[B B^T] = I).
- `stored`: the model's own reward-inferred z (its limit; the same for every seed).
- `late`: ER-FB over each demonstration's states from step 100 on (the planner's start
  from the initial state left out).
- `cerK`: the ratio minus K (r - K: a shift of the reward FB's z sees, which moves z by
  -K E_rho'[B]): z = mean_demos B - K mean_rho' B, projected.

Each z runs the 20 evaluation episodes of `benchmarks/external_nominal.py` (its initial
states and per-seed demonstrations). Rows are appended to runs/er_variants/rows.csv
(columns: `HEADER`).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

import numpy as np
import torch

from rbfm import EVAL_SEED
from rbfm.data.dataset import load_dataset
from rbfm.envs import DOMAINS
from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy
from rbfm.evaluation.aggregate import stratified_iqm
from rbfm.fb.checkpoint import CheckpointError, load_checkpoint
from rbfm.fb.model import FBModel
from rbfm.fb.moment import whiten
from rbfm.fb.networks import project
from rbfm.inference import Demos, load_demos
from rbfm.inference.expert_demos import demo_embedding, warm_start

sys.path.insert(0, str(Path(__file__).parent))
from external_files import appending, demonstrated, start, write_page

ROWS = Path("runs/er_variants/rows.csv")
HEADER = ["domain", "task", "seed", "variant", "return", "share", "cosine_stored", "info",
          "model", "reference"]  # fmt: skip
REFERENCE_STATES = 100_000
# The variants that read no reference sample rho'.
WITHOUT_RHO = ("er", "stored", "late")


def _b(model: FBModel, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model.backward_map(c) for c in x.split(8192)])


def reachable(model: FBModel, domain: str, task: str, engine: RolloutEngine) -> torch.Tensor:
    """rho': the states of pi_z for 64 z from the prior, one episode each."""
    g = torch.Generator().manual_seed(0)
    zs = project(torch.randn(64, model.cfg.z_dim, generator=g), model.radius)
    res = engine.run(EnvSpec(domain, task), fb_policy(model, zs), 64, seed=12345, record=True)
    assert res.trajectories is not None
    states = np.concatenate([t["observation"] for t in res.trajectories])
    return torch.as_tensor(states, dtype=torch.float32)


def from_dataset(path: str, domain: str) -> torch.Tensor:
    """rho': REFERENCE_STATES next states drawn uniformly from a dataset (seed 0)."""
    data = load_dataset(path, domain)
    n = min(REFERENCE_STATES, len(data))
    return torch.as_tensor(data.subsample(n, 0).next_observation, dtype=torch.float32)


def whitened(model: FBModel, demos: Demos, b_rho: torch.Tensor) -> torch.Tensor:
    """E_rho'[B B^T]^{-1} mean_demos B, projected: `er`'s whiten=True with the moment of
    the sample rho' (`rbfm.fb.moment.whiten`, its ridge included)."""
    moment = b_rho.T.double() @ b_rho.double() / len(b_rho)
    return project(whiten(moment, demo_embedding(model, demos)), model.radius)


def rer(
    model: FBModel, demos: Demos, b_rho: torch.Tensor, seed: int, log: bool = False
) -> tuple[torch.Tensor, str]:
    """z from a classifier's density ratio over rho' (its odds, or with `log` its logit,
    as the reward), and the classifier's last loss and the odds' effective sample size,
    which say whether rho' overlaps the demos."""
    b_demo = _b(model, torch.as_tensor(np.concatenate(demos.next_states()), dtype=torch.float32))
    torch.manual_seed(seed)
    d = b_rho.shape[1]
    net = torch.nn.Sequential(
        torch.nn.Linear(d, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 1),
    )  # fmt: skip
    opt = torch.optim.AdamW(net.parameters(), 1e-3, weight_decay=1e-4)
    labels = torch.cat([torch.ones(256), torch.zeros(256)])
    for _ in range(2000):
        a = b_demo[torch.randint(len(b_demo), (256,))]
        b = b_rho[torch.randint(len(b_rho), (256,))]
        logits = net(torch.cat([a, b])).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits = torch.cat([net(c) for c in b_rho.split(8192)]).squeeze(1)
        w = torch.softmax(logits, 0)  # r = exp(logit), normalised over rho'
        r = logits / len(logits) if log else w
        z = project((r[:, None] * b_rho).sum(0), model.radius)
    return z, f"loss {loss.item():.3f}, effective sample {float(1 / (w**2).sum()):.0f}"


def _logistic(x: torch.Tensor, y: torch.Tensor, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Class-balanced L2-regularised logistic regression (LBFGS, float64): (w, b)."""
    w = torch.zeros(x.shape[1], dtype=x.dtype, requires_grad=True)
    b = torch.zeros((), dtype=x.dtype, requires_grad=True)
    opt = torch.optim.LBFGS(
        [w, b], max_iter=500, tolerance_grad=1e-9, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = _balanced_loss(x @ w + b, y) + 0.5 * lam * (w @ w)
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


def _balanced_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean log-loss of each class, averaged: demonstrations (1) and rho' (0) weigh alike."""
    pos = torch.nn.functional.softplus(-logits[y == 1]).mean()
    return 0.5 * (pos + torch.nn.functional.softplus(logits[y == 0]).mean())


LAMBDAS = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1)


def linear_rer(
    model: FBModel, demos: Demos, b_rho: torch.Tensor, log: bool = False
) -> tuple[torch.Tensor, str]:
    """The log density ratio restricted to B's span: a logistic regression on B(s) / sqrt(d)
    between demonstrated states and rho', its L2 weight chosen from LAMBDAS by held-out
    log-loss (leave one demonstration out, rho' in as many random folds), then refitted on
    all. z from its odds over rho' (as `rer`), or with `log` from its logit centred over
    rho' (a constant reward moves z by a multiple of E_rho'[B] and no policy)."""
    scale = model.radius
    parts = [_b(model, torch.as_tensor(s, dtype=torch.float32)) for s in demos.next_states()]
    x_rho = b_rho.double() / scale
    folds = torch.randperm(len(x_rho), generator=torch.Generator().manual_seed(0)) % len(parts)
    held: dict[float, float] = {}
    for lam in LAMBDAS:
        losses = []
        for k in range(len(parts)):
            x_d = torch.cat([q for j, q in enumerate(parts) if j != k]).double() / scale
            x = torch.cat([x_d, x_rho[folds != k]])
            y = torch.cat([torch.ones(len(x_d)), torch.zeros(int((folds != k).sum()))])
            w, b = _logistic(x, y.double(), lam)
            x_t = torch.cat([parts[k].double() / scale, x_rho[folds == k]])
            y_t = torch.cat([torch.ones(len(parts[k])), torch.zeros(int((folds == k).sum()))])
            losses.append(float(_balanced_loss(x_t @ w + b, y_t.double())))
        held[lam] = float(np.mean(losses))
    lam = min(held, key=held.__getitem__)
    x_d = torch.cat(parts).double() / scale
    y = torch.cat([torch.ones(len(x_d)), torch.zeros(len(x_rho))]).double()
    w, b = _logistic(torch.cat([x_d, x_rho]), y, lam)
    logits = x_rho @ w + b
    odds = torch.softmax(logits, 0)
    r = (logits - logits.mean()) / len(logits) if log else odds
    z = project((r[:, None] * b_rho.double()).sum(0).float(), model.radius)
    info = (f"lambda {lam:g}, held-out loss {held[lam]:.3f}, effective sample "
            f"{float(1 / (odds**2).sum()):.0f}")  # fmt: skip
    return z, info


def table(variants: list[str]) -> str:
    """Per model, reference and domain: each variant's IQM share of the planner and its
    return over the stored z's, over (seed, task) with rliable's stratified-bootstrap CI;
    "-" for a variant not run on every task of the group."""
    with open(ROWS, newline="") as f:
        rows = list(csv.DictReader(f))
    lines = ["| model | reference | tasks | " + " | ".join(variants) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in variants) + " |"]  # fmt: skip
    groups = dict.fromkeys((r["model"], r["reference"], r["domain"]) for r in rows)
    for model, reference, domain in groups:
        sel = [
            r
            for r in rows
            if (r["model"], r["reference"], r["domain"]) == (model, reference, domain)
        ]
        per: dict[tuple[str, str], dict[int, float]] = {}
        for r in sel:  # the last row of a (task, variant, seed) counts
            per.setdefault((r["task"], r["variant"]), {})[int(r["seed"])] = float(r["share"])
        names = list(dict.fromkeys(r["task"] for r in sel))
        # The variants run on every task of the group; the others show "-".
        ran = [v for v in variants if all((t, v) in per for t in names)]
        tasks = [t for t in names if (t, "stored") in per]
        if not ran or not tasks:
            continue
        seeds = sorted(per[tasks[0], ran[0]])
        if any(sorted(per[t, v]) != seeds for t in tasks for v in ran):
            continue
        shares = {v: np.array([[per[t, v][s] for t in tasks] for s in seeds]) for v in ran}
        stored = {t: next(iter(per[t, "stored"].values())) for t in tasks}
        ratios = {v: shares[v] / np.array([stored[t] for t in tasks]) for v in ran}
        a, b = stratified_iqm(shares), stratified_iqm(ratios)
        cells = [f"{a[v][0]:.1f}% [{a[v][1]:.1f}, {a[v][2]:.1f}]; "
                 f"{b[v][0]:.2f}x [{b[v][1]:.2f}, {b[v][2]:.2f}]" if v in ran else "-"
                 for v in variants]  # fmt: skip
        lines.append(f"| {model} | {reference} | {domain} ({len(tasks)}, {len(seeds)} seeds) | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["walker:walk"])
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--variants", nargs="+", default=["er", "rer", "late", "cer1", "cer0.5"])
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="DOMAIN=NAME",
        help="the model a domain's tasks run on (default: the domain's)",
    )
    p.add_argument(
        "--dataset",
        action="append",
        default=[],
        metavar="DOMAIN=PATH",
        help="rho' from this dataset (default: the model's reachable states)",
    )
    p.add_argument(
        "--table",
        action="store_true",
        help="print the pooled table of the rows so far and run nothing",
    )
    p.add_argument("--page", type=Path, help="with --table: also write the table to this file")
    args = p.parse_args()
    fixed = ("er", "rer", "rer-log", "lrer", "lrer-log", "wer", "stored", "late")
    for v in args.variants:  # before any rollout
        if v not in fixed and not re.fullmatch(r"cer\d+(\.\d+)?", v):
            p.error(f"--variants: {v} (valid: {', '.join(fixed)}, cerK with K a number, "
                    "e.g. cer0.5)")  # fmt: skip
    models: dict[str, str] = {}
    datasets: dict[str, str] = {}
    for option, given, into in (("--model", args.model, models),
                                ("--dataset", args.dataset, datasets)):  # fmt: skip
        for item in given:
            domain, sep, value = item.partition("=")
            if not sep or domain not in DOMAINS or not value:
                p.error(f"{option} {item}: DOMAIN=VALUE with DOMAIN one of {', '.join(DOMAINS)}")
            into[domain] = value
    if args.page and not args.table:
        p.error("--page: only with --table")
    if args.table:
        if not ROWS.exists():
            p.error(f"--table: no rows yet ({ROWS})")
        text = table([v for v in args.variants if v != "stored"])
        print(text)
        if args.page:
            write_page(
                args.page,
                "ER-FB's variants against a reference sample: the table",
                ROWS,
                "Per model, reference sample rho' and domain: each variant's IQM over (seed, "
                "task) of its share (%) of the planner's return on the seed's 4 "
                "demonstrations, then of its return over the stored z's (the model given the "
                "task's reward), with rliable's stratified-bootstrap 95% CIs; 20 evaluation "
                "episodes per (seed, task), nominal physics.",
                text,
            )
        return
    for domain, root in datasets.items():
        if not Path(root).exists():
            p.error(f"--dataset {domain}={root}: no such directory")
    start(p, args)
    asked = {item.partition(":")[0] for item in args.tasks}
    for option, given in (("--model", models), ("--dataset", datasets)):
        if unused := sorted(set(given) - asked):
            p.error(f"{option} {', '.join(unused)}: no --tasks of that domain")
    # Each model loads and stores a z for each of its tasks before any episode runs.
    for item in args.tasks:
        domain, _, task = item.partition(":")
        try:
            _, meta = load_checkpoint(models.get(domain, domain), domain)
        except CheckpointError as e:
            p.error(f"--model {models.get(domain, domain)}: {e}")
        if task not in meta.get("task_z", {}):
            p.error(f"--model {models.get(domain, domain)}: stores no z for {task}")
    with appending(ROWS, HEADER) as add, RolloutEngine(0) as engine:
        for domain, task, path in demonstrated(args.tasks):
            demos = load_demos(path)
            if "late" in args.variants and (short := int(demos.lengths.min())) <= 100:
                raise SystemExit(f"late: {path} holds an episode of {short} steps, none from "
                                 "step 100 on")  # fmt: skip
            name = models.get(domain, domain)
            model, meta = load_checkpoint(name, domain)
            # rho' costs 64 episodes (or a dataset's read): only where a variant reads it.
            b_rho, reference = torch.empty(0, model.cfg.z_dim), "none"
            if any(v not in WITHOUT_RHO for v in args.variants):
                if domain in datasets:
                    reference, states = datasets[domain], from_dataset(datasets[domain], domain)
                else:
                    reference = "reachable"
                    states = reachable(model, domain, "walk" if domain != "cheetah" else "run",
                                       engine)  # fmt: skip
                b_rho = _b(model, states)
            stored = torch.tensor(meta["task_z"][task])
            stored_return = None
            for seed in range(args.seeds):
                picked = demos.sample(4, seed)
                for v in args.variants:
                    info = ""
                    if v == "er":
                        z = warm_start(model, picked)
                    elif v in ("rer", "rer-log"):
                        z, info = rer(model, picked, b_rho, seed, log=v == "rer-log")
                    elif v in ("lrer", "lrer-log"):
                        z, info = linear_rer(model, picked, b_rho, log=v == "lrer-log")
                    elif v == "wer":
                        z = whitened(model, picked, b_rho)
                    elif v == "stored":
                        z = stored
                    elif v == "late":
                        with torch.no_grad():
                            per = [model.backward_map(torch.as_tensor(s[100:])).mean(0)
                                   for s in picked.next_states()]  # fmt: skip
                        z = project(torch.stack(per).mean(0), model.radius)
                    elif v.startswith("cer"):
                        shift = float(v[3:])
                        z = project(demo_embedding(model, picked) - shift * b_rho.mean(0),
                                    model.radius)  # fmt: skip
                    else:
                        raise AssertionError(v)  # checked above
                    if v == "stored" and stored_return is not None:
                        ret = stored_return  # one z for every seed: evaluated once
                    else:
                        ret = engine.run(EnvSpec(domain, task), fb_policy(model, z), 20,
                                         seed=EVAL_SEED).returns.mean()  # fmt: skip
                    if v == "stored":
                        stored_return = ret
                    share = 100 * ret / picked.returns.mean()
                    cos = float(torch.cosine_similarity(z.flatten(), stored, 0))
                    add([domain, task, seed, v, f"{ret:.1f}", f"{share:.1f}", f"{cos:.2f}", info,
                         name, reference])  # fmt: skip
                    print(f"{domain}:{task} seed {seed} {v}: {ret:.1f} ({share:.0f}%), cosine "
                          f"to the stored z {cos:.2f} {info}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
