"""ConViT Table 1 measured on our models: heads, width, parameters and FLOPs at 224 px, and speed.

Parameters and FLOPs are counted on the meta device (shapes only: no memory, no arithmetic, well under
a second even for ConViT-B+), with torch's flop counter. FLOPs follow the paper's convention, which we
infer from its numbers: multiply-adds of the linear layers and the patch embedding, without the
attention matmuls (q k^T, attn v). Our DeiT-S gives 4.24G that way and 4.60G with them; Table 1 prints
4.3G and DeiT's own paper 4.6G. Both counts go in the record (``macs_no_attn``, ``macs``). Parameters
follow the same kind of inference: every one of Table 1's 12 sizes equals our count without the
1000-class head, rounded (ConViT-S 27.34M -> "27M", ConViT-B+ 152.11M -> "152M"); with the head, 7 of 12
rows miss under rounding and 4 under truncation. Both go in the record (``params_no_head``, ``params``).

Speed is the forward pass at 224 px in images/s, timed on the device at hand (the paper: a Quadro GP100
at batch 128): the median of the timed steps on a GPU, the fastest single step on a CPU (shared
machines: other processes only ever slow a step down). A CPU cannot time ConViT-B+ at batch 128 in a
tiny run's budget, so the batch, steps, device and threads are arguments and go in the record; the
report compares the ConViT/DeiT ratio per size, which is what survives a change of hardware.
"""
from __future__ import annotations

import timm
import torch

from repro.functions import register
from repro.models.cost import count_macs, count_params, macs_without_attention
from repro.probes.speed import throughput
from repro.train import ddp
from repro.train.model import register_models

def count(name: str, img_size: int = 224, **kwargs) -> dict:
    """Heads, width, parameters and MACs (all / without attention matmuls) of a timm model at ``img_size``."""
    register_models("convit")
    with torch.device("meta"):
        model = timm.create_model(name, img_size=img_size, **kwargs)
    macs, by_op = count_macs(model, img_size, by_op=True)
    heads = {b.attn.num_heads for b in model.blocks}
    if len(heads) != 1:
        raise ValueError(f"{name}: blocks disagree on the number of heads {sorted(heads)}")
    params = count_params(model)
    return {"heads": heads.pop(), "dim": model.embed_dim, "params": params,
            "params_no_head": params - count_params(model.get_classifier()),
            "macs": macs, "macs_no_attn": macs_without_attention(by_op)}


@register("convit.table1_measure")
def measure(config: dict) -> dict:
    """Probe run: one Table 1 row (``args``: model, kwargs, img_size, speed {batch, steps, warmup, amp})."""
    args = config.get("args") or {}
    if not args.get("model"):
        raise ValueError("table1.measure needs config['args']['model'], the timm name of the row's model")
    name, kwargs, size = args["model"], dict(args.get("kwargs") or {}), int(args.get("img_size", 224))
    out = count(name, size, **kwargs)
    speed = {"batch": 128, "steps": 10, "warmup": 3, "amp": False, **(args.get("speed") or {})}
    if config.get("mode") == "smoke":
        speed.update(batch=1, steps=1, warmup=0)  # smoke runs check the path, not the number
    device = ddp.setup("auto").device
    model = timm.create_model(name, img_size=size, **kwargs).to(device)
    batch, steps, amp = int(speed["batch"]), int(speed["steps"]), bool(speed["amp"])
    if device.type == "cuda":  # CUDA events: the median step is stable
        t = throughput(model, batch=batch, img_size=size, steps=steps, warmup=int(speed["warmup"]), amp=amp)
    else:  # a shared CPU: the fastest of single timed steps is the one least disturbed by other processes
        throughput(model, batch=batch, img_size=size, steps=max(1, int(speed["warmup"])), warmup=0, amp=amp)
        t = max((throughput(model, batch=batch, img_size=size, steps=1, warmup=0, amp=amp) for _ in range(steps)),
                key=lambda r: r["images_per_s"])
    out.update(images_per_s=t["images_per_s"], speed_batch=t["batch"], speed_steps=steps,
               speed_timing="median step (CUDA events)" if device.type == "cuda" else "fastest step (perf_counter)",
               speed_device=t["device"], speed_amp=t["amp"], speed_threads=torch.get_num_threads(), img_size=size)
    return out
