"""What single-task offline RL reaches on a dataset: a ceiling to read FB models against.

    python benchmarks/offline_td3.py --dataset datasets/exorl/walker/rnd/buffer \
        [--tasks walk run] [--updates 50000] [--eval-every 10000] [--hidden 256] [--bc 0]

ExORL's protocol (Yarats et al. 2022): the reward-free data relabelled with one task's
reward, then TD3 trained offline on it, no behaviour cloning. URLB's actor and double
critic (rbfm.exploration.ddpg: first layer Linear-LayerNorm-Tanh) at `--hidden` width,
discount 0.99, batch 256, lr 1e-4, Polyak 0.01, target-policy noise 0.2 clipped at 0.3,
the actor updated every second step. `--bc W` adds TD3+BC's cloning term to the actor's
loss, -Q / mean|Q| + W * mean (pi(s) - a)^2 (alpha = 1 / W). Prints the mean return
(+- 95% CI over `--episodes` episodes, initial states of seed 0) every `--eval-every`
updates. An FB model of the same width that scores far below this has a learner
problem; one near it is at what its data supports for the task.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
from torch.nn import functional as F

from rbfm.data.dataset import load_dataset
from rbfm.data.relabel import relabel_all
from rbfm.evaluation import EnvSpec, RolloutEngine
from rbfm.evaluation.aggregate import mean_ci
from rbfm.exploration.ddpg import Actor, Critic, DDPGConfig, polyak, target_action

GAMMA, BATCH, LR, TAU, ACTOR_EVERY = 0.99, 256, 1e-4, 0.01, 2
DDPG = DDPGConfig()  # target-policy noise: stddev 0.2 clipped at 0.3, as URLB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--tasks", nargs="+", help="default: all of the domain's")
    parser.add_argument("--updates", type=int, default=50_000)
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--bc", type=float, default=0.0, help="TD3+BC weight (0: TD3)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = load_dataset(args.dataset)
    domain = data.domain.name
    tasks = args.tasks or list(data.domain.rewards)
    for task in tasks:
        if task not in data.domain.rewards:
            parser.error(
                f"--tasks: {task!r} is not a {domain} task ({', '.join(data.domain.rewards)})"
            )
    t = data.transitions()
    rewards = relabel_all(data, domain, progress=True)  # one pass over the states
    print(data.summary())
    arrays = {
        "obs": torch.as_tensor(t.observation, dtype=torch.float32),
        "action": torch.as_tensor(t.action, dtype=torch.float32),
        "next_obs": torch.as_tensor(t.next_observation, dtype=torch.float32),
        "discount": torch.as_tensor(t.discount, dtype=torch.float32),
    }
    with RolloutEngine(workers=0) as engine:
        for task in tasks:
            reward = torch.as_tensor(rewards[task], dtype=torch.float32)
            print(f"\n{task}: relabelled reward mean {float(reward.mean()):.3f}")
            train(domain, task, {**arrays, "reward": reward}, args, engine)


def train(
    domain: str,
    task: str,
    arrays: dict[str, torch.Tensor],
    args: argparse.Namespace,
    engine: RolloutEngine,
) -> None:
    torch.manual_seed(args.seed)
    obs_dim, action_dim = arrays["obs"].shape[1], arrays["action"].shape[1]
    actor = Actor(obs_dim, action_dim, args.hidden)
    critic = Critic(obs_dim, action_dim, args.hidden)
    actor_target, critic_target = copy.deepcopy(actor), copy.deepcopy(critic)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=LR)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(args.seed)

    def policy(obs: np.ndarray, ep: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return actor(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    print(f"{'update':>7} {'return':>16} {'Q(s,a) data':>12} {'updates/s':>9}")
    start = time.perf_counter()
    for step in range(1, args.updates + 1):
        idx = torch.randint(len(arrays["reward"]), (BATCH,), generator=gen)
        b = {k: v[idx] for k, v in arrays.items()}
        with torch.no_grad():
            next_action = target_action(actor_target, b["next_obs"], DDPG, gen)
            q1, q2 = critic_target(b["next_obs"], next_action)
            target = b["reward"] + GAMMA * b["discount"] * torch.min(q1, q2).squeeze(-1)
        q1, q2 = critic(b["obs"], b["action"])
        critic_loss = F.mse_loss(q1.squeeze(-1), target) + F.mse_loss(q2.squeeze(-1), target)
        critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()
        if step % ACTOR_EVERY == 0:
            pi = actor(b["obs"])
            q = critic(b["obs"], pi)[0].squeeze(-1)
            loss = -q.mean() / q.abs().mean().detach() if args.bc else -q.mean()
            if args.bc:
                loss = loss + args.bc * (pi - b["action"]).square().mean()
            actor_opt.zero_grad()
            loss.backward()
            actor_opt.step()
            polyak(actor, actor_target, TAU)
            polyak(critic, critic_target, TAU)
        if step % args.eval_every == 0:
            rate = step / (time.perf_counter() - start)
            res = engine.run(EnvSpec(domain, task), policy, args.episodes, seed=0)
            m, h = mean_ci(res.returns)
            q_data = float(q1.detach().mean())
            print(f"{step:>7} {m:>9.1f} +- {h:>5.1f} {q_data:>12.1f} {rate:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
