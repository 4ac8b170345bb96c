"""Run by the Python that `wheelsmith doctor` examines: one fast-path op on tiny inputs, forward
and (where the op has one) backward, against a plain-PyTorch reference.

usage: fastpath_ops.py OP

One op per process, so that a crash or a hung kernel takes no other op along (doctor runs each
under a time limit). Prints one line `WHEELSMITH-OP {json}`:

  status     ok | wrong (error over the tolerance) | error (the op's own message)
  phase      where an error happened: setup (the device), import, forward, backward, reference
  max_error  the largest |out - ref| over the outputs and gradients, each relative to that
             tensor's largest |ref|; `worst` names the tensor
  kind       for errors: oom (out of memory), busy (the GPU is taken), else null

The reference runs in float64 on the CPU (mamba's own reference scan: float32 on the device, as
its tests do). Never imports wheelsmith: it runs in other environments.
"""
# Each op imports its package inside (a missing one is that op's error); the ops' signatures
# mirror upstream's; zip(strict=) is newer than some Pythons this runs in.
# ruff: noqa: PLC0415, PLR0917, B905

from __future__ import annotations

import json
import math
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

warnings.simplefilter("ignore")

import torch  # noqa: E402 - after the warnings filter
import torch.nn.functional as F  # noqa: E402

Tensor = Any  # torch.Tensor; the examined Python may have no type information for it
OpFn = Callable[..., Any]

FP32_TOL = 1e-3
LOW_PRECISION_TOL = 5e-2  # bfloat16 / float16 inputs, as models train


class Failed(Exception):
    def __init__(self, phase: str, error: BaseException,
                 errors: Sequence[tuple[str, float]] = ()) -> None:
        super().__init__(phase)
        self.phase = phase
        self.error = error
        self.errors = list(errors)  # what was compared before it failed (the forward pass)


def relative_error(got: Tensor, want: Tensor) -> float:
    got = got.detach().to("cpu", torch.float64)
    want = want.detach().to("cpu", torch.float64)
    if got.shape != want.shape:
        return math.inf
    diff = (got - want).abs().max().item() if want.numel() else 0.0
    scale = want.abs().max().item() if want.numel() else 0.0
    if math.isnan(diff):
        return math.inf
    return diff / max(scale, 1e-12)


def leaves(device: str, dtype: Any, *tensors: Tensor) -> list[Tensor]:
    return [t.to(device, dtype).requires_grad_() for t in tensors]


def as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def attempt(phase: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
        raise Failed(phase, exc) from exc


def compare(op: OpFn, reference: OpFn, inputs: Sequence[Tensor], outputs: Sequence[str],
            grads: Sequence[str] = (), ref_device: str = "cpu",
            ref_dtype: Any = torch.float64) -> list[tuple[str, float]]:
    """(tensor name, relative error) for each output and, when `grads` names them, the
    gradients of the inputs for random output cotangents."""
    got = as_tuple(attempt("forward", lambda: op(*inputs)))[:len(outputs)]
    ref_inputs = [t.detach().to(ref_device, ref_dtype).requires_grad_() for t in inputs]
    want = as_tuple(attempt("reference", lambda: reference(*ref_inputs)))[:len(outputs)]
    errors = [(name, relative_error(g, w)) for name, g, w in zip(outputs, got, want)]
    if not grads:
        return errors
    cotangents = [torch.randn(w.shape, dtype=torch.float64) for w in want]

    def loss(values: Sequence[Tensor], device: str, dtype: Any) -> Tensor:
        return sum((v * c.to(device, dtype)).sum() for v, c in zip(values, cotangents))

    try:
        got_grads = attempt("backward", lambda: torch.autograd.grad(
            loss([g.float() for g in got], inputs[0].device.type, torch.float32), inputs,
            allow_unused=True))
        want_grads = attempt("reference", lambda: torch.autograd.grad(
            loss(want, ref_device, ref_dtype), ref_inputs, allow_unused=True))
    except Failed as failed:
        raise Failed(failed.phase, failed.error, errors) from failed.error
    for name, g, w in zip(grads, got_grads, want_grads):
        errors.append((name, math.inf if g is None or w is None else relative_error(g, w)))
    return errors


# --- the ops ---------------------------------------------------------------------------------


def conv_reference(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    width, seqlen = weight.shape[1], x.shape[-1]
    out = F.conv1d(x, weight.unsqueeze(1), bias, padding=width - 1, groups=weight.shape[0])
    return F.silu(out[..., :seqlen])


def op_causal_conv1d_fn(device: str) -> tuple[list[tuple[str, float]], float]:
    from causal_conv1d import causal_conv1d_fn

    batch, dim, seqlen, width = 2, 64, 100, 4
    inputs = leaves(device, torch.float32, torch.randn(batch, dim, seqlen),
                    torch.randn(dim, width), torch.randn(dim))
    return compare(lambda x, w, b: causal_conv1d_fn(x, w, b, activation="silu"), conv_reference,
                   inputs, ("out",), ("dx", "dweight", "dbias")), FP32_TOL


def op_causal_conv1d_update(device: str) -> tuple[list[tuple[str, float]], float]:
    """One decoding step, as transformers calls it: x (batch, dim, 1), the state updated in
    place (compared too)."""
    from causal_conv1d import causal_conv1d_update

    batch, dim, width = 2, 64, 4
    x, state, weight, bias = (torch.randn(batch, dim, 1), torch.randn(batch, dim, width),
                              torch.randn(dim, width), torch.randn(dim))

    def fused(x: Tensor, state: Tensor, weight: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
        state = state.detach().clone()
        return causal_conv1d_update(x, state, weight, bias, "silu"), state

    def reference(x: Tensor, state: Tensor, weight: Tensor, bias: Tensor
                  ) -> tuple[Tensor, Tensor]:
        window = torch.cat([state, x], dim=-1)
        out = F.conv1d(window, weight.unsqueeze(1), bias, groups=dim)[..., -x.shape[-1]:]
        return F.silu(out), window[..., -state.shape[-1]:]

    inputs = [t.to(device, torch.float32) for t in (x, state, weight, bias)]
    return compare(fused, reference, inputs, ("out", "conv_state")), FP32_TOL


def gated_delta_reference(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
                          state: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The gated delta rule one step at a time: S = S * exp(g_t); S += k_t (beta_t (v_t -
    k_t S)); o_t = q_t S, with q and k L2-normalised and q scaled by 1/sqrt(K)."""
    q = F.normalize(q, dim=-1) * q.shape[-1] ** -0.5
    k = F.normalize(k, dim=-1)
    batch, steps, heads, dk = q.shape
    if state is None:
        state = q.new_zeros(batch, heads, dk, v.shape[-1])
    outs = []
    for t in range(steps):
        state = state * g[:, t].exp()[..., None, None]
        delta = (v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], state)) * beta[:, t, :, None]
        state = state + torch.einsum("bhk,bhv->bhkv", k[:, t], delta)
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], state))
    return torch.stack(outs, dim=1), state


def gated_delta_inputs(device: str, steps: int) -> list[Tensor]:
    """q, k, v in bfloat16 (the model's dtype), the log decay g in float32, beta in bfloat16,
    as transformers' GatedDeltaNet layers pass them."""
    batch, heads, dim = 2, 2, 64
    q, k, v = (torch.randn(batch, steps, heads, dim) for _ in range(3))
    g = F.logsigmoid(torch.rand(batch, steps, heads))
    beta = torch.rand(batch, steps, heads).sigmoid()
    return [*leaves(device, torch.bfloat16, q, k, v), *leaves(device, torch.float32, g),
            *leaves(device, torch.bfloat16, beta)]


def op_chunk_gated_delta_rule(device: str) -> tuple[list[tuple[str, float]], float]:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    def fused(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> Any:
        return chunk_gated_delta_rule(q, k, v, g=g, beta=beta, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True)

    return compare(fused, gated_delta_reference, gated_delta_inputs(device, 100),
                   ("out", "final_state"), ("dq", "dk", "dv", "dg", "dbeta")), LOW_PRECISION_TOL


def op_fused_recurrent_gated_delta_rule(device: str) -> tuple[list[tuple[str, float]], float]:
    """Forward only (fla has no backward for it; transformers uses it to decode), from a
    non-zero initial state."""
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    inputs = [t.detach() for t in gated_delta_inputs(device, 16)]
    state = torch.randn(2, 2, 64, 64).to(device, torch.float32)

    def fused(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, h0: Tensor) -> Any:
        return fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0,
                                                output_final_state=True,
                                                use_qk_l2norm_in_kernel=True)

    return compare(fused, gated_delta_reference, [*inputs, state],
                   ("out", "final_state")), LOW_PRECISION_TOL


def op_selective_scan_fn(device: str) -> tuple[list[tuple[str, float]], float]:
    """Mamba's selective scan (variable B and C, D, z, delta bias, softplus) against mamba's
    own reference scan, in float32 on the device as its tests do."""
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref

    batch, dim, dstate, seqlen = 2, 4, 8, 128
    inputs = leaves(device, torch.float32, torch.randn(batch, dim, seqlen),
                    0.5 * torch.rand(batch, dim, seqlen), -0.5 * torch.rand(dim, dstate),
                    torch.randn(batch, dstate, seqlen), torch.randn(batch, dstate, seqlen),
                    torch.randn(dim), torch.randn(batch, dim, seqlen), 0.5 * torch.rand(dim))

    def call(scan: OpFn) -> OpFn:
        return lambda u, delta, a, b, c, d, z, bias: scan(
            u, delta, a, b, c, d, z=z, delta_bias=bias, delta_softplus=True)

    return compare(call(selective_scan_fn), call(selective_scan_ref), inputs, ("out",),
                   ("du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias"),
                   ref_device=device, ref_dtype=torch.float32), 5e-3


def op_flash_attn_func(device: str) -> tuple[list[tuple[str, float]], float]:
    """Causal attention, (batch, seqlen, heads, headdim) in bfloat16, against SDPA."""
    from flash_attn import flash_attn_func

    def reference(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                                             is_causal=True)
        return out.transpose(1, 2)

    inputs = leaves(device, torch.bfloat16, *(torch.randn(2, 128, 4, 64) for _ in range(3)))
    return compare(lambda q, k, v: flash_attn_func(q, k, v, causal=True), reference, inputs,
                   ("out",), ("dq", "dk", "dv")), LOW_PRECISION_TOL


OPS: dict[str, Callable[[str], tuple[list[tuple[str, float]], float]]] = {
    "causal_conv1d_fn": op_causal_conv1d_fn,
    "causal_conv1d_update": op_causal_conv1d_update,
    "chunk_gated_delta_rule": op_chunk_gated_delta_rule,
    "fused_recurrent_gated_delta_rule": op_fused_recurrent_gated_delta_rule,
    "selective_scan_fn": op_selective_scan_fn,
    "flash_attn_func": op_flash_attn_func,
}


def kind(error: BaseException) -> str | None:
    text = str(error)
    if isinstance(error, getattr(torch, "OutOfMemoryError", ())) or "out of memory" in text:
        return "oom"
    if "busy or unavailable" in text:
        return "busy"
    return None


def finite(errors: Sequence[tuple[str, float]]) -> dict[str, float | None]:
    return {name: error if math.isfinite(error) else None for name, error in errors}


def run(name: str) -> dict[str, Any]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    result: dict[str, Any] = {"op": name, "device": device, "status": "error", "phase": None,
                              "max_error": None, "worst": None, "tolerance": None,
                              "errors": {}, "error": None, "kind": None}
    start = time.monotonic()
    try:
        attempt("setup", lambda: torch.zeros(1, device=device).sum().item())
        torch.manual_seed(0)
        try:
            errors, tolerance = OPS[name](device)
        except ImportError as exc:
            raise Failed("import", exc) from exc
        if device == "cuda":
            attempt("forward", torch.cuda.synchronize)
    except Failed as failed:
        message = f"{type(failed.error).__name__}: {failed.error}".strip()
        result.update(phase=failed.phase, error=message[:2000], kind=kind(failed.error),
                      errors=finite(failed.errors))
    else:
        worst, max_error = max(errors, key=lambda item: item[1])
        result.update(status="ok" if max_error <= tolerance else "wrong", max_error=max_error,
                      worst=worst, tolerance=tolerance, errors=finite(errors))
        if not math.isfinite(max_error):
            result["max_error"] = None
    result["seconds"] = round(time.monotonic() - start, 2)
    return result


if __name__ == "__main__":
    print("WHEELSMITH-OP " + json.dumps(run(sys.argv[1])), flush=True)
