"""A small Qwen3.5 text model (4 layers, 3 of them GatedDeltaNet) run forward on the GPU, to
check doctor's model view against what the model does: whether transformers logged that a
fast-path function fell back to its torch code, and the tokens per second.

usage: forward.py LABEL   (prints one JSON line)"""

import json
import logging
import sys
import time

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
from transformers.utils import logging as hf_logging

records: list[str] = []


class Keep(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        records.append(record.getMessage())


hf_logging.set_verbosity_warning()
hf_logging.get_logger("transformers").addHandler(Keep())
torch.manual_seed(0)
config = Qwen3_5TextConfig(vocab_size=4096, hidden_size=1024, intermediate_size=2816,
                           num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                           head_dim=128, linear_num_key_heads=8, linear_num_value_heads=16,
                           linear_key_head_dim=64, linear_value_head_dim=64)
model = Qwen3_5ForCausalLM(config).to("cuda", torch.bfloat16).eval()
tokens = torch.randint(0, config.vocab_size, (4, 2048), device="cuda")
with torch.no_grad():
    loss = model(tokens, labels=tokens).loss.item()  # warm-up (Triton compiles here)
    torch.cuda.synchronize()
    start = time.perf_counter()
    steps = 10
    for _ in range(steps):
        model(tokens)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
fell_back = sorted({m.split("`")[1] for m in records if "falling back" in m})
print(json.dumps({"label": sys.argv[1], "layer_types": config.layer_types,
                  "tokens_per_s": round(steps * tokens.numel() / seconds),
                  "loss": round(loss, 4), "fell_back": fell_back}))
