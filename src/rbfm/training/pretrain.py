"""FB pretraining runs: periodic IQM evaluation, best/latest checkpoints, exact resume.

A run directory holds:
  run.json                 what the run is (dataset, domain, preset, seed, config)
  resume.pt                everything needed to continue (one atomic file)
  latest.{safetensors,json}, best.{safetensors,json}   loadable models
  train.csv, eval.csv, tb/ losses, updates/s, IQM and per-task returns

Killed at any moment and rerun with the same command, a run restarts from
resume.pt (weights, targets, optimiser moments, random generator, step) and,
on CPU with the same seed, ends with the same weights as an uninterrupted run:
evaluation never draws from the training generator.
"""

from __future__ import annotations

import csv
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from rbfm import checks
from rbfm.atomic import atomic_write
from rbfm.checks import in_range
from rbfm.data import Dataset, load_dataset
from rbfm.data.dataset import draw_transitions
from rbfm.device import pick_device, slow_bf16
from rbfm.errors import ConfigError
from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy, iqm
from rbfm.fb.checkpoint import save_checkpoint
from rbfm.fb.config import FBConfig, fb_config
from rbfm.fb.context import gather_windows
from rbfm.fb.model import FBModel, FBTrainer, check_cuda_graph
from rbfm.fb.reward_inference import infer_z, labelled_states
from rbfm.run_identity import bind_identity

EVAL_SEED = 1_000_003  # evaluation episodes use fixed initial states, separate from training


@dataclass(frozen=True)
class PretrainConfig:
    dataset: str
    out: str
    domain: str | None = None
    preset: str = "cpu"
    steps: int | None = None  # default: the preset's
    transitions: int | None = None  # uniform subsample size; default min(1M, all)
    seed: int = 0
    device: str | None = None
    bf16: bool | None = None
    eval_every: int | None = None
    eval_episodes: int | None = None
    checkpoint_every: int | None = None
    workers: int = 0  # rollout worker processes for evaluation (0: in-process)
    # torch.compile the networks of the update. Not part of the run's identity, like the
    # thread count: a resumed run reproduces an uninterrupted one only with the same.
    compile: bool = False
    # Replay the update as one CUDA graph (`FBTrainer`'s cuda_graph); likewise not part of
    # the run's identity.
    cuda_graph: bool = False
    log_every: int = 1000
    # Any other FBConfig fields (`rbfm pretrain --set target_pessimism=0`): ablations.
    overrides: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        checks.seed("pretrain", self.seed)
        for name, low in (("transitions", 1), ("workers", 0), ("log_every", 1)):
            value = getattr(self, name)
            if value is not None:
                in_range("pretrain", name, value, low, integer=True)
        named = ("steps", "bf16", "eval_every", "eval_episodes", "checkpoint_every")
        if clash := [k for k, _ in self.overrides if k in named]:
            raise ConfigError(
                f"pretrain: {clash[0]} is an option of its own (--{clash[0].replace('_', '-')}), "
                "not a --set field"
            )

    def fb(self) -> FBConfig:
        return fb_config(
            self.preset,
            **dict(self.overrides),
            steps=self.steps,
            bf16=self.bf16,
            eval_every=self.eval_every,
            eval_episodes=self.eval_episodes,
            checkpoint_every=self.checkpoint_every,
        )


def _identity(
    cfg: PretrainConfig, fb: FBConfig, domain: str, dataset: Path, m: int
) -> dict[str, Any]:
    # A run can be extended with a larger --steps, unless its learning rate decays over them.
    free = {"eval_every", "eval_episodes", "checkpoint_every"}
    if fb.lr_end == 1:
        free.add("steps")
    model_cfg = {k: v for k, v in fb.to_json().items() if k not in free}
    return {
        "dataset": str(dataset.resolve()),
        "domain": domain,
        "preset": cfg.preset,
        "seed": cfg.seed,
        "transitions": m,
        "config": json.loads(json.dumps(model_cfg)),
    }


def _upgrade(before: dict[str, Any], ident: dict[str, Any]) -> dict[str, Any]:
    """FBConfig fields a run's stored identity lacks take their defaults, so that the
    run resumes under the config it was trained with."""
    defaults = json.loads(json.dumps(FBConfig().to_json()))
    added = {k: defaults[k] for k in ident["config"]}
    return before | {"config": added | before.get("config", {})}


# Logged per row of train.csv; "conservative" and "bc" are empty when their term is off.
_TRAIN_METRICS = (
    "fb_offdiag",
    "fb_diag",
    "ortho",
    "actor_loss",
    "q",
    "q_data",
    "conservative",
    "bc",
)


class _Csv:
    """Appends rows; on resume drops rows written after the resumed step."""

    def __init__(self, path: Path, fields: list[str], resume_step: int) -> None:
        self.path, self.fields = path, fields
        rows = []
        if path.exists():
            with open(path, newline="") as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= resume_step]
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fields)
            writer.writeheader()
            writer.writerows(rows)

    def write(self, row: dict[str, Any]) -> None:
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, self.fields).writerow(row)


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save through a temporary file: a killed process never leaves half a file."""
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


class _Windows:
    """The context windows of the training transitions' s and s', gathered per batch
    from the dataset's rows (`rbfm.fb.context`)."""

    def __init__(self, ds: Dataset, index: np.ndarray, k: int, device: torch.device) -> None:
        rows = ds.rows
        after = np.zeros_like(rows["action"])
        after[:-1] = rows["action"][1:]  # the action executed at each row's state
        self.obs = torch.as_tensor(rows["observation"], device=device)
        self.after = torch.as_tensor(after, device=device)
        self.rows = torch.as_tensor(ds.transition_rows[index], device=device)
        starts = ds.episode_starts[ds.transition_episodes[index]]
        self.starts = torch.as_tensor(starts, device=device)
        self.k = k

    def widen(self, batch: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
        r, e = self.rows[idx], self.starts[idx]
        s_win = gather_windows(self.obs, self.after, r - 1, e, self.k)
        next_win = gather_windows(self.obs, self.after, r, e, self.k)
        return batch | {
            "observation": torch.cat([batch["observation"], s_win], -1),
            "next_observation": torch.cat([batch["next_observation"], next_win], -1),
            "next_state": batch["next_observation"],
        }


class _Clock:
    """Seconds spent in updates ("train": evaluations excluded) and in all ("wall"), summed
    over resumes up to the last checkpoint; None for a run whose checkpoint holds no
    count (its time so far is unknown)."""

    def __init__(self, elapsed: dict[str, float] | None) -> None:
        self.elapsed = elapsed
        self.started = time.perf_counter()
        self.wall_before = elapsed["wall"] if elapsed else 0.0

    def add_train(self, seconds: float) -> None:
        if self.elapsed is not None:
            self.elapsed["train"] += seconds

    def timing(self) -> dict[str, float]:
        """The run's time to now, for a checkpoint's description."""
        if self.elapsed is None:
            return {}
        self.elapsed["wall"] = self.wall_before + time.perf_counter() - self.started
        return {
            "train_seconds": round(self.elapsed["train"], 1),
            "wall_seconds": round(self.elapsed["wall"], 1),
        }


class _Logs:
    """train.csv, eval.csv and TensorBoard, each cut back to the resumed step."""

    def __init__(self, run: Path, tasks: list[str], step: int) -> None:
        fields = ["step", "seconds", "updates_per_s", *_TRAIN_METRICS]
        self.train_csv = _Csv(run / "train.csv", fields, step)
        self.eval_csv = _Csv(run / "eval.csv", ["step", "iqm", *tasks], step)
        self.tb = SummaryWriter(str(run / "tb"), purge_step=step)

    def train(self, step: int, metrics: dict[str, float], seconds: float, rate: float) -> None:
        row = {k: metrics.get(k, "") for k in _TRAIN_METRICS}
        self.train_csv.write(
            {"step": step, "seconds": round(seconds, 3), "updates_per_s": round(rate, 2), **row}
        )
        for k, v in metrics.items():
            self.tb.add_scalar(f"train/{k}", v, step)
        self.tb.add_scalar("train/updates_per_s", rate, step)

    def evaluation(self, step: int, score: float, returns: dict[str, np.ndarray]) -> None:
        means = {t: float(r.mean()) for t, r in returns.items()}
        self.eval_csv.write({"step": step, "iqm": score, **means})
        self.tb.add_scalar("eval/iqm", score, step)
        for t, v in means.items():
            self.tb.add_scalar(f"eval/{t}", v, step)

    def close(self) -> None:
        self.tb.close()


def _resume(
    path: Path, model: FBModel, trainer: FBTrainer, cfg: PretrainConfig, device: torch.device
) -> tuple[int, dict[str, Any], dict[str, float] | None]:
    """Loads resume.pt into the model and trainer: its step, best and elapsed times (a
    fresh run's when there is none)."""
    if not path.exists():
        return 0, {"iqm": -np.inf, "step": 0}, {"train": 0.0, "wall": 0.0}
    state = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(state["model"])
    trainer.load_state_dict(state["trainer"])
    step = int(state["step"])
    # Runs saved before --compile or --cuda-graph existed were eager.
    for flag, chosen in (("compile", cfg.compile), ("cuda_graph", cfg.cuda_graph)):
        before = bool(state.get(flag, False))
        if before != chosen:
            option = "--" + flag.replace("_", "-")
            warnings.warn(
                f"{path.parent} was trained {'with' if before else 'without'} {option} until "
                f"step {step} and resumes {'with' if chosen else 'without'} it: it goes on "
                "correctly, but not bit-identically to an uninterrupted run",
                stacklevel=3,
            )
    return step, dict(state["best"]), state.get("elapsed")


def _evaluate(
    trainer: FBTrainer,
    engine: RolloutEngine,
    domain: str,
    labelled: tuple[np.ndarray, dict[str, np.ndarray]],
    episodes: int,
) -> tuple[float, dict[str, np.ndarray], dict[str, list[float]]]:
    """The IQM over all tasks' episodes, each task's returns, and the tasks'
    reward-inferred z."""
    eval_obs, eval_rewards = labelled
    tasks, k = list(eval_rewards), episodes
    # All tasks in one lockstep batch: one policy call per step serves every episode.
    with trainer.served() as served:
        served.eval()
        z = torch.stack([infer_z(served, eval_obs, eval_rewards[t]) for t in tasks])
        specs = [EnvSpec(domain, t) for t in tasks for _ in range(k)]
        result = engine.run(specs, fb_policy(served, z.repeat_interleave(k, 0)), seed=EVAL_SEED)
        served.train()
    returns = {t: result.returns[i * k : (i + 1) * k] for i, t in enumerate(tasks)}
    score = iqm(np.concatenate(list(returns.values())))
    return score, returns, {t: z[i].tolist() for i, t in enumerate(tasks)}


def _training_data(
    cfg: PretrainConfig, fb: FBConfig, ds: Dataset, m: int, device: torch.device
) -> tuple[dict[str, torch.Tensor], _Windows | None, tuple[np.ndarray, dict[str, np.ndarray]]]:
    """The m transitions trained on (a uniform draw, or all), their context windows when
    the model reads a context, and the reward-labelled states of the evaluations."""
    index = draw_transitions(len(ds), m, cfg.seed) if m < len(ds) else np.arange(len(ds))
    data = ds.transitions(index)
    fields = ("observation", "action", "next_observation", "discount")
    tensors = {k: torch.as_tensor(getattr(data, k), device=device) for k in fields}
    windows = _Windows(ds, index, fb.context, device) if fb.context else None
    return tensors, windows, labelled_states(data, ds.domain.name, fb.reward_samples, cfg.seed + 1)


def _description(cfg: PretrainConfig, ds: Dataset, m: int) -> dict[str, Any]:
    """What every checkpoint's JSON says of the run."""
    return {
        "domain": ds.domain.name,
        "preset": cfg.preset,
        "dataset": {
            "path": str(ds.directory.resolve()),
            "algo": ds.algo,
            "episodes": ds.num_episodes,
            "transitions": m,
            "seed": cfg.seed,
        },
    }


def _warn_slow_bf16(bf16: bool, device: torch.device) -> None:
    """bfloat16 autocast on a CPU without bfloat16 units runs torch's generic kernel, far
    slower than float32 (rbfm.inference.common measures it)."""
    if bf16 and slow_bf16(device):
        warnings.warn(
            "bf16: this CPU has no bfloat16 units (avx512_bf16 or AMX); bfloat16 autocast "
            "runs a generic kernel here, many times slower than float32: drop --bf16",
            stacklevel=3,
        )


def pretrain(cfg: PretrainConfig, progress: bool = True) -> Path:
    """Trains (or resumes) an FB model; returns the run directory."""
    fb = cfg.fb()
    device = pick_device(cfg.device)
    check_cuda_graph(cfg.cuda_graph, device, cfg.compile, fb.average_tau)
    _warn_slow_bf16(fb.bf16, device)
    ds = load_dataset(cfg.dataset, cfg.domain)
    domain = ds.domain.name
    if cfg.transitions is not None and cfg.transitions > len(ds):  # a subsample of it
        raise ConfigError(
            f"transitions: {cfg.transitions} is out of range (valid: 1 to {len(ds)}, the "
            f"transitions of {cfg.dataset})"
        )
    m = min(cfg.transitions or 1_000_000, len(ds))
    run = Path(cfg.out)
    run.mkdir(parents=True, exist_ok=True)
    bind_identity(
        run / "run.json", _identity(cfg, fb, domain, ds.directory, m), "pretraining run", _upgrade
    )

    tensors, windows, labelled = _training_data(cfg, fb, ds, m, device)

    torch.manual_seed(cfg.seed)
    model = FBModel(ds.domain.obs_dim, ds.domain.action_dim, fb).to(device)
    if fb.obs_norm:  # from the transitions trained on; a resumed run loads the same ones
        model.set_obs_stats(tensors["observation"].mean(0), tensors["observation"].std(0))
    trainer = FBTrainer(model, cfg.seed, compile=cfg.compile, cuda_graph=cfg.cuda_graph)
    resume = run / "resume.pt"
    step, best, elapsed = _resume(resume, model, trainer, cfg, device)
    if step > fb.steps:  # a run is extended, never cut back: its files are past the cap
        raise ConfigError(
            f"steps: {run} has trained {step} updates, more than {fb.steps} (valid: {step} "
            "or more, to go on; its best model so far is its best.json)"
        )
    clock = _Clock(elapsed)
    logs = _Logs(run, list(labelled[1]), step)
    described = _description(cfg, ds, m)
    evaluated: dict[str, Any] = {}  # the last evaluation, if at the current step

    def checkpoint() -> None:
        # Evaluated at this very step: latest carries its IQM and z, as best does.
        extra = evaluated if evaluated.get("step") == step else {}
        with trainer.served() as served:
            save_checkpoint(
                run / "latest", served, {**described, **extra, "step": step, **clock.timing()}
            )
        state = {"step": step, "model": model.state_dict(), "trainer": trainer.state_dict()}
        flags = {"best": best, "compile": cfg.compile, "cuda_graph": cfg.cuda_graph}
        atomic_save(
            {**state, **flags, **({"elapsed": elapsed} if elapsed is not None else {})}, resume
        )

    n = len(tensors["action"])
    bar = tqdm(
        total=fb.steps,
        initial=step,
        desc=f"pretrain {domain}",
        unit="upd",
        disable=not progress,
        smoothing=0.05,
    )
    tick, since = time.perf_counter(), step
    with RolloutEngine(cfg.workers) as engine:
        while step < fb.steps:
            idx = torch.randint(n, (fb.batch_size,), generator=trainer.gen, device=device)
            batch = {k: v[idx] for k, v in tensors.items()}
            if windows is not None:
                batch = windows.widen(batch, idx)
            metrics = trainer.update(batch)
            step += 1
            bar.update(1)
            if step % cfg.log_every == 0 or step == fb.steps:
                now = time.perf_counter()
                clock.add_train(now - tick)
                values = {k: float(v) for k, v in metrics.items()}
                logs.train(step, values, now - tick, (step - since) / (now - tick))
                tick, since = now, step
            if step % fb.eval_every == 0 or step == fb.steps:
                score, returns, task_z = _evaluate(
                    trainer, engine, domain, labelled, fb.eval_episodes
                )
                logs.evaluation(step, score, returns)
                evaluated = {"step": step, "iqm": score, "task_z": task_z}
                bar.set_postfix(iqm=f"{score:.1f}", best=f"{max(score, best['iqm']):.1f}")
                if score > best["iqm"]:
                    best = {"iqm": score, "step": step}
                    # The tasks' z travel with the model: demonstrations can then be
                    # generated without the dataset (e.g. from a shipped checkpoint).
                    with trainer.served() as served:
                        save_checkpoint(
                            run / "best", served, {**described, **evaluated, **clock.timing()}
                        )
                tick = time.perf_counter()  # evaluation time is not training time
            if step % fb.checkpoint_every == 0 or step == fb.steps:
                checkpoint()
    bar.close()
    logs.close()
    return run
