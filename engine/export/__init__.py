"""Exports of a trained run to the tools its users already have.

    export_merged(src, out)    a plain HF ``MambaForCausalLM`` folder (LoRA merged in) + model card
    export_peft(src, out)      a PEFT adapter folder + ``out/base``, the UNMERGED base it applies to
    export_gguf(src, out)      one ``.gguf`` file for llama.cpp / Ollama / LM Studio

``src`` is a run folder written by the trainer (or any model folder ``MambaLM.load`` reads).
Each writes its files atomically and returns the notices a user should see (list of str).
"""

from .gguf_file import export_gguf
from .merged import export_merged
from .peft import PEFT_SUPPORT, export_peft, peft_notices, peft_refused
from .source import is_gguf, not_export_files

__all__ = ["PEFT_SUPPORT", "export_gguf", "export_merged", "export_peft", "is_gguf",
           "not_export_files", "peft_notices", "peft_refused"]
