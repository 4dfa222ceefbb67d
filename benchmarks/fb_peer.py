"""rbfm's FB pretraining against metamotivo's FBAgent: same data, sizes, updates and evaluation.

    python benchmarks/fb_peer.py --dataset DIR [--domain cheetah] [--preset cpu]
        [--updates 200000] [--eval-every 10000] [--seeds 0 1 2] [--episodes 10]
        [--impl rbfm metamotivo] [--set KEY=VALUE ...] [--out runs/fb_peer.csv]

Each seed trains every implementation on the same subsample of the dataset (drawn as
`rbfm pretrain` draws it) with the same sequence of uniform minibatches, and evaluates
each one with rbfm's code: z from the same labelled states by rbfm's reward formula
(mean r(s) B(s) on the sqrt(d) sphere) with the implementation's own B, then that z's
mean action through rbfm's RolloutEngine from the same initial states (EVAL_SEED).
ms/update counts the updates only (batch gathering included, evaluation not); metamotivo's
first update pays a one-off ~1 s (its first torch.compiler call), noise in short runs only.

Resumable: after every evaluation each (impl, seed) saves its weights, optimisers and
random generators to `OUT.state/`; rerun the same command and it goes on from there
(a finished (impl, seed) is skipped; other arguments are refused). On CPU with the same
thread count a resumed run's rows equal an uninterrupted one's.

`metamotivo` is facebookresearch/metamotivo's FBAgent with the rbfm preset's sizes and
hyperparameters, and its knobs set so that its objective is rbfm's: TD target and actor
on the min of the two F heads, orthonormality weighted as rbfm weighs it. What then
differs is its code (architecture details, initialisation, action clamping). For
`metamotivo-dmc` its loss choices are those of its DMC example instead: TD target on the
mean of the heads, its orthonormality term (half rbfm's) at rbfm's coefficient. The
mapping and what stays different are printed at start.

metamotivo is never a dependency of rbfm: run this in a throwaway virtualenv,

    python3.11 -m venv ../peer-venv
    ../peer-venv/bin/pip install torch==2.13.0   # exactly this pin: the CPU wheel
    mkdir -p ../peer-src/metamotivo
    git --git-dir=<metamotivo mirror> archive HEAD | tar -x -C ../peer-src/metamotivo
    ../peer-venv/bin/pip install --no-deps ../peer-src/metamotivo  # or PyPI's metamotivo
    ../peer-venv/bin/pip install -e .                              # rbfm
    ../peer-venv/bin/python benchmarks/fb_peer.py --dataset ...

`--no-deps` keeps metamotivo from pulling another torch; of its own dependencies the
agent needs only safetensors (which rbfm brings), tyro and wandb serve its examples.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import io
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from rbfm.atomic import atomic_csv
from rbfm.checks import assignments
from rbfm.data import Transitions, load_dataset
from rbfm.device import pick_device
from rbfm.errors import ConfigError
from rbfm.evaluation import EnvSpec, RolloutEngine, iqm, mean_ci
from rbfm.fb import FB_PRESETS, FBConfig, FBModel, FBTrainer, fb_config, reward_z
from rbfm.fb.reward_inference import labelled_states
from rbfm.run_identity import bind_identity
from rbfm.training.pretrain import EVAL_SEED, atomic_save

IMPLS = ("rbfm", "metamotivo", "metamotivo-dmc")
MISSING = "metamotivo not installed: see docstring for the throwaway virtualenv"


class Batches:
    """Uniform minibatches of the transitions; the same sequence for every impl of a seed."""

    def __init__(self, data: Transitions, seed: int, device: torch.device) -> None:
        self.tensors = {
            k: torch.as_tensor(getattr(data, k), device=device)
            for k in ("observation", "action", "next_observation", "discount")
        }
        self.n, self.device = len(data), device
        self.gen = torch.Generator().manual_seed(seed)

    def sample(self, size: int) -> dict[str, torch.Tensor]:
        idx = torch.randint(self.n, (size,), generator=self.gen).to(self.device)
        return {k: v[idx] for k, v in self.tensors.items()}


class Learner(Protocol):
    def update(self, step: int) -> None: ...
    def served(self) -> contextlib.AbstractContextManager[object]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def backward(self, obs: torch.Tensor) -> torch.Tensor: ...
    def act(self, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor: ...


class RbfmLearner:
    def __init__(self, dims: tuple[int, int], cfg: FBConfig, seed: int, batches: Batches) -> None:
        torch.manual_seed(seed)
        self.model = FBModel(*dims, cfg).to(batches.device)
        self.trainer = FBTrainer(self.model, seed)
        self.batches, self.batch_size = batches, cfg.batch_size

    def update(self, step: int) -> None:
        self.trainer.update(self.batches.sample(self.batch_size))

    def served(self) -> contextlib.AbstractContextManager[object]:
        """The weights evaluation reads: averaged ones when average_tau > 0."""
        return self.trainer.served()

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "trainer": self.trainer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.trainer.load_state_dict(state["trainer"])

    @torch.no_grad()
    def backward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.model.backward_map(obs)

    def act(self, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.model.act(obs, z)


class MetamotivoReplay:
    """The one method of metamotivo's DictBuffer that FBAgent.update calls, in its layout."""

    def __init__(self, batches: Batches) -> None:
        self.batches = batches

    def sample(self, size: int) -> dict[str, Any]:
        b = self.batches.sample(size)
        return {
            "observation": b["observation"],
            "action": b["action"],
            # (N, 1): FBAgent multiplies the (N, N) target by it row-wise. DMC discounts
            # are all 1, so rbfm's gamma * discount and metamotivo's gamma * ~terminated agree.
            "next": {
                "observation": b["next_observation"],
                "terminated": b["discount"][:, None] == 0,
            },
        }


def _width(sizes: list[int], name: str, notes: list[str]) -> int:
    """metamotivo has one width per network: the first of rbfm's, noted when they differ."""
    if len(set(sizes)) > 1:
        notes.append(f"~ {name}: rbfm widths {sizes}, metamotivo one width {sizes[0]}")
    return sizes[0]


def metamotivo_config(
    cfg: FBConfig, dims: tuple[int, int], device: torch.device, dmc: bool
) -> tuple[dict[str, Any], list[str]]:
    """FBAgent's config for an rbfm preset, and the mapping notes (= identical, ~ differs)."""
    from metamotivo.fb import FBAgentConfig

    notes: list[str] = []
    c = FBAgentConfig()
    m, a, t = c.model, c.model.archi, c.train
    m.obs_dim, m.action_dim, m.device = *dims, device.type
    # Its normaliser is a BatchNorm (running statistics, momentum 0.01); rbfm's uses the
    # data's mean and std. Off in its DMC example and in rbfm's presets.
    m.norm_obs = cfg.obs_norm
    m.actor_std, t.stddev_clip = cfg.actor_noise, cfg.actor_noise_clip
    a.z_dim, a.norm_z, a.b.norm = cfg.z_dim, True, True
    # metamotivo's embeddings are [Linear-LN-Tanh, (Linear-ReLU)*, Linear(h, h/2)-ReLU] and
    # its heads (Linear(h, h)-ReLU)* then Linear: one width h for embedding layers, 2x the
    # embedding size, and head layers. rbfm's presets use one width too (cpu 256, paper 1024).
    pre = list(cfg.preprocessor_hidden)
    a.f.hidden_dim = _width([*pre, 2 * cfg.embed_dim, *cfg.forward_hidden], "F", notes)
    a.actor.hidden_dim = _width([*pre, 2 * cfg.embed_dim, *cfg.actor_hidden], "actor", notes)
    a.f.embedding_layers = a.actor.embedding_layers = len(pre) + 1
    a.f.hidden_layers, a.actor.hidden_layers = len(cfg.forward_hidden), len(cfg.actor_hidden)
    a.f.num_parallel, a.f.model, a.actor.model = 2, "simple", "simple"
    a.b.hidden_dim = _width(list(cfg.backward_hidden), "B", notes)
    a.b.hidden_layers = len(cfg.backward_hidden)
    t.batch_size, t.discount, t.fb_target_tau = cfg.batch_size, cfg.gamma, cfg.tau
    t.lr_f = t.lr_b = t.lr_actor = cfg.lr
    t.train_goal_ratio = cfg.z_mix_ratio
    # Its heads are combined as mean - p * |F1 - F2|: p = 0.5 is their min, rbfm's choice.
    t.actor_pessimism_penalty = 0.5
    t.fb_pessimism_penalty = 0.0 if dmc else 0.5
    # Its ortho term, 0.5 mean_{i!=j} (B_i.B_j)^2 - mean |B_i|^2, is half of rbfm's
    # ||E[B B^T] - I||^2 in gradient (up to N / (N - 1)): twice the coefficient matches it.
    t.ortho_coef = cfg.ortho_coef * (1 if dmc else 2)
    notes += [
        f"= z_dim {cfg.z_dim}, batch {cfg.batch_size}, lr {cfg.lr} (F, B, actor), "
        f"discount {cfg.gamma}, tau {cfg.tau}, z mix {cfg.z_mix_ratio}, "
        f"actor noise {cfg.actor_noise} clip {cfg.actor_noise_clip}",
        f"= F/actor width {a.f.hidden_dim}, embedding {a.f.hidden_dim // 2} "
        f"({a.f.embedding_layers} layers), head layers F {a.f.hidden_layers} actor "
        f"{a.actor.hidden_layers}; B {a.b.hidden_layers} x {a.b.hidden_dim}; two F heads",
        "= actor loss on the min of the two heads (actor_pessimism_penalty 0.5)",
        "~ TD target on the mean of the target heads (fb_pessimism_penalty 0; rbfm: min)"
        if dmc
        else "= TD target on the min of the target heads (fb_pessimism_penalty 0.5)",
        f"{'~' if dmc else '='} ortho_coef {t.ortho_coef} on its term, which is half rbfm's: "
        + ("half rbfm's weight" if dmc else "rbfm's weight"),
        "~ its embeddings end in ReLU and its first head layer is Linear-ReLU "
        "(rbfm: linear embeddings, then Linear-LayerNorm-Tanh)",
        "~ its init: orthogonal weights (gain sqrt(2) in F's batched layers, 1 elsewhere), "
        "zero biases",
        "~ its noisy actions: clamped to [-1+1e-6, 1-1e-6] with a straight-through gradient",
        "~ its speed: Adam not fused; the actor loss also back-propagates through F's weights",
    ]
    # rbfm's departures from the paper that metamotivo has no counterpart for.
    if cfg.lr_end < 1:
        notes.append(f"~ rbfm: cosine lr decay to {cfg.lr_end} x lr (metamotivo: constant)")
    if cfg.average_tau > 0:
        notes.append(
            f"~ rbfm: evaluates weights averaged at tau {cfg.average_tau} (metamotivo: online)"
        )
    if cfg.obs_norm:
        notes.append(
            "~ observations standardised: rbfm by the data's statistics, "
            "metamotivo by a BatchNorm's running ones"
        )
    if cfg.conservative_coef > 0:
        notes.append(f"~ rbfm: value conservatism {cfg.conservative_coef} (metamotivo: none)")
    return dataclasses.asdict(c), notes


class MetamotivoLearner:
    def __init__(self, config: dict[str, Any], seed: int, batches: Batches) -> None:
        from metamotivo.fb import FBAgent

        torch.manual_seed(seed)  # its initialisation and update noise use the global generator
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its compile settings
            self.agent = FBAgent(**config)
        self.replay = {"train": MetamotivoReplay(batches)}

    def update(self, step: int) -> None:
        self.agent.update(self.replay, step)

    def served(self) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()

    _OPTIMIZERS = ("actor_optimizer", "backward_optimizer", "forward_optimizer")

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.agent._model.state_dict(),
            **{k: getattr(self.agent, k).state_dict() for k in self._OPTIMIZERS},
            "rng": torch.get_rng_state(),  # its update noise and z come from the global one
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agent._model.load_state_dict(state["model"])
        for k in self._OPTIMIZERS:
            getattr(self.agent, k).load_state_dict(state[k])
        torch.set_rng_state(state["rng"])

    def backward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.agent._model.backward_map(obs)  # no_grad, already on the sqrt(d) sphere

    def act(self, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.agent.act(obs, z, mean=True)


def evaluate(
    learner: Learner,
    labelled: tuple[np.ndarray, dict[str, np.ndarray]],
    domain: str,
    episodes: int,
    engine: RolloutEngine,
    device: torch.device,
) -> dict[str, np.ndarray]:
    """Per task, the returns of `episodes` episodes of the reward-inferred z's mean action."""
    with learner.served():
        obs, rewards = labelled
        tasks = list(rewards)
        b = learner.backward(torch.as_tensor(obs, device=device))
        z = torch.stack(
            [
                reward_z(b, torch.as_tensor(rewards[t], dtype=torch.float32, device=device))
                for t in tasks
            ]
        ).repeat_interleave(episodes, 0)

        @torch.no_grad()
        def act(o: np.ndarray, idx: np.ndarray) -> np.ndarray:
            rows = z[torch.as_tensor(idx, device=device)]
            return learner.act(torch.as_tensor(o, device=device), rows).cpu().numpy()

        specs = [EnvSpec(domain, t) for t in tasks for _ in range(episodes)]
        returns = engine.run(specs, act, seed=EVAL_SEED).returns
        return {t: returns[i * episodes : (i + 1) * episodes] for i, t in enumerate(tasks)}


def _state_dir(out: Path, args: dict[str, Any]) -> Path:
    """`OUT.state/`, tied to the arguments that decide the rows (not seeds nor impls)."""
    same = {k: v for k, v in args.items() if k not in ("seeds", "impl", "threads", "out")}
    state = out.with_name(out.name + ".state")
    state.mkdir(parents=True, exist_ok=True)
    try:
        bind_identity(state / "args.json", same, "benchmark run")
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    return state


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        rows: list[dict[str, Any]] = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            r[k] = v if k == "impl" else int(v) if k in ("seed", "updates") else float(v)
    return rows


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_csv(path, rows)


def summary(rows: list[dict[str, Any]], tasks: list[str]) -> str:
    """Markdown: per impl, the final evaluation's mean +- 95% CI over seeds."""
    cols = [*tasks, "iqm", "ms_per_update"]
    lines = [
        "| impl | seeds | updates | " + " | ".join(cols) + " |",
        "|" + "---|" * (len(cols) + 3),
    ]
    for impl in dict.fromkeys(r["impl"] for r in rows):
        mine = [r for r in rows if r["impl"] == impl]
        last = max(r["updates"] for r in mine)
        final = [r for r in mine if r["updates"] == last]
        cells = []
        for c in cols:
            mean, half = mean_ci(np.array([r[c] for r in final]))
            cells.append(f"{mean:.1f} ± {half:.1f}")
        lines.append(f"| {impl} | {len(final)} | {last} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="ExORL buffer or a directory above it")
    parser.add_argument("--domain", default=None, help="default: from the dataset path")
    parser.add_argument("--transitions", type=int, default=None, help="default min(1M, all)")
    parser.add_argument("--preset", default="cpu", choices=sorted(FB_PRESETS))
    parser.add_argument("--updates", type=int, default=None, help="default: the preset's steps")
    parser.add_argument("--eval-every", type=int, default=None, help="default: the preset's")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=None, help="per task; the preset's")
    parser.add_argument("--reward-samples", type=int, default=None, help="the preset's")
    parser.add_argument("--impl", nargs="+", choices=IMPLS, default=["rbfm", "metamotivo"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--device", default=None, help="default: cuda if available")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of rbfm's FBConfig, as `rbfm pretrain --set` (e.g. lr_end=0); "
        "metamotivo's mapping ignores fields it has no counterpart for",
    )
    parser.add_argument("--out", default="runs/fb_peer.csv")
    args = parser.parse_args()

    if any(i.startswith("metamotivo") for i in args.impl):
        try:
            import metamotivo.fb  # noqa: F401
        except ImportError:
            print(MISSING)
            return
    torch.set_num_threads(args.threads)
    cfg = fb_config(
        args.preset,
        steps=args.updates,
        eval_every=args.eval_every,
        eval_episodes=args.episodes,
        reward_samples=args.reward_samples,
        **dict(assignments(args.set)),
    )
    device = pick_device(args.device)
    ds = load_dataset(args.dataset, args.domain)
    domain, dims = ds.domain.name, (ds.domain.obs_dim, ds.domain.action_dim)
    m = min(args.transitions or 1_000_000, len(ds))
    print(
        f"torch {torch.__version__} on {device}, {torch.get_num_threads()} threads; {domain}, "
        f"{m:,} transitions, preset {args.preset}, {cfg.steps} updates, eval every "
        f"{cfg.eval_every}, {cfg.eval_episodes} episodes per task, "
        f"{cfg.reward_samples} labelled states" + (f"; rbfm with {args.set}" if args.set else "")
    )
    for impl in args.impl:
        if impl != "rbfm":
            print(f"{impl} vs rbfm:")
            for note in metamotivo_config(cfg, dims, device, impl == "metamotivo-dmc")[1]:
                print(f"  {note}")

    out = Path(args.out)
    state_dir = _state_dir(out, vars(args))
    rows = _read_rows(out)
    tasks: list[str] = []
    with RolloutEngine(workers=0) as engine:
        for seed in args.seeds:
            data = ds.subsample(m, seed) if m < len(ds) else ds.transitions()
            labelled = labelled_states(data, domain, cfg.reward_samples, seed + 1)
            tasks = list(labelled[1])
            # Implementations alternate within a seed so that machine load hits both alike.
            for impl in args.impl:
                batches = Batches(data, seed, device)
                learner: Learner
                if impl == "rbfm":
                    learner = RbfmLearner(dims, cfg, seed, batches)
                else:
                    config = metamotivo_config(cfg, dims, device, impl == "metamotivo-dmc")[0]
                    learner = MetamotivoLearner(config, seed, batches)
                saved = state_dir / f"{impl}-s{seed}.pt"
                step, seconds = 0, 0.0
                if saved.exists():
                    state = torch.load(saved, map_location=device, weights_only=True)
                    learner.load_state_dict(state["learner"])
                    batches.gen.set_state(state["batches"])
                    step, seconds = state["step"], state["seconds"]
                # Rows after the saved step were written by a run killed before saving.
                rows = [
                    r
                    for r in rows
                    if (r["impl"], r["seed"]) != (impl, seed) or r["updates"] <= step
                ]
                while step < cfg.steps:
                    block = min(cfg.eval_every, cfg.steps - step)
                    start = time.perf_counter()
                    for _ in range(block):
                        learner.update(step)
                        step += 1
                    _sync(device)
                    seconds += time.perf_counter() - start
                    returns = evaluate(learner, labelled, domain, cfg.eval_episodes, engine, device)
                    row = {
                        "impl": impl,
                        "seed": seed,
                        "updates": step,
                        "ms_per_update": 1000 * seconds / step,
                        "iqm": iqm(np.concatenate(list(returns.values()))),
                        **{t: float(r.mean()) for t, r in returns.items()},
                    }
                    rows.append(row)
                    write_csv(rows, out)  # every evaluation: a killed run keeps its rows
                    atomic_save(
                        {
                            "learner": learner.state_dict(),
                            "batches": batches.gen.get_state(),
                            "step": step,
                            "seconds": seconds,
                        },
                        saved,
                    )
                    print(
                        f"{impl:<18} seed {seed} {step:>8} updates  IQM {row['iqm']:7.1f}  "
                        f"{row['ms_per_update']:6.1f} ms/update",
                        flush=True,
                    )
    print(f"\n{args.out}\n")
    print(summary(rows, tasks))


if __name__ == "__main__":
    main()
