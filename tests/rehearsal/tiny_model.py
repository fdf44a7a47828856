"""A tiny random-weight Llama for the REAL sglang on CPU, built locally (no hub download).

hidden 64, 2 layers, a byte-level BPE tokenizer trained on a few sentences with the tokenizers
library, a minimal chat template; and the test-only `vllm._custom_ops` shim that SGLang's CPU path
imports but never calls (absent from the wheel). Neither ever goes into a role.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.rehearsal.box import CACHE

BUILD = r"""
import json, sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
text = ["The quick brown fox jumps over the lazy dog.", "SGLang serves large language models fast.",
        "Pipeline, tensor and expert parallel layouts share the same GPUs.", "hello world " * 20,
        "Benchmarks measure tokens per second at every level of concurrency."] * 50
tokenizer = Tokenizer(models.BPE(unk_token=None))
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<s>", "</s>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tokenizer.train_from_iterator(text, trainer)
tokenizer.save(str(out / "tokenizer.json"))
template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant: {% endif %}")
(out / "tokenizer_config.json").write_text(json.dumps({
    "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
    "model_max_length": 2048, "chat_template": template}))
config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=64, intermediate_size=128,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                     max_position_embeddings=2048, bos_token_id=0, eos_token_id=1, torch_dtype="bfloat16")
torch.manual_seed(0)
model = LlamaForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
(out / "complete").write_text("ok")
print(out)
"""

SHIM = {
    "vllm/__init__.py": "",
    "vllm/_custom_ops.py": (
        "# TEST-ONLY shim: SGLang's CPU path imports this name from vllm; it is never called on CPU.\n"
        "def rotary_embedding(*args, **kwargs):\n    raise NotImplementedError('vllm shim: not used on CPU')\n"
    ),
}


def build(python: Path, directory: Path | None = None) -> Path:
    """The model directory (built once, cached), made with the real venv's torch and transformers."""
    directory = directory or CACHE / "tiny-llama"
    if not (directory / "complete").exists():
        subprocess.run([str(python), "-c", BUILD, str(directory)], check=True, capture_output=True, text=True, timeout=600)
    return directory


def shim(directory: Path) -> Path:
    """A directory to put on PYTHONPATH for the real server on CPU."""
    for name, content in SHIM.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return directory
