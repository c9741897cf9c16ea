"""GGUF export for llama.cpp (and Ollama / LM Studio, which embed it), written with the ``gguf``
package from the ggml project. Architecture ``mamba``; every tensor float32.

Tensor names (HF -> GGUF, as llama.cpp's own converter maps them):
    backbone.embeddings.weight (v, d)            token_embd.weight
    backbone.layers.i.norm.weight (d,)           blk.i.attn_norm.weight
    mixer.in_proj.weight (2e, d)                 blk.i.ssm_in.weight
    mixer.conv1d.weight (e, 1, k) -> (e, k)      blk.i.ssm_conv1d.weight   (+ .bias (e,))
    mixer.x_proj.weight (r+2n, e)                blk.i.ssm_x.weight
    mixer.dt_proj.weight (e, r) / .bias (e,)     blk.i.ssm_dt.weight / .bias
    mixer.A_log (e, n) -> A = -exp(A_log)        blk.i.ssm_a
    mixer.D (e,)                                 blk.i.ssm_d
    mixer.out_proj.weight (d, e)                 blk.i.ssm_out.weight
    backbone.norm_f.weight (d,)                  output_norm.weight
    lm_head.weight (v, d)  (untied only)         output.weight
Tokenizer: llama.cpp's "gpt2" byte-level BPE with the GPT-2 pre-tokenizer; the byte tokenizer is
the 256 byte characters with no real merges (the gguf writer cannot store an empty merge list and
llama.cpp requires the key, so one merge of two bytes that never occur in UTF-8, 0xC0 0xC0, is
written). Rows past the tokenizer (vocabulary padding) are unused ``[PAD<i>]`` tokens.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError
from ..params import EMBEDDINGS, LM_HEAD, NORM_F
from ..safeio import resolved
from ..tokenizer import BPETokenizer, byte_tokenizer_json
from .source import (
    RunSource,
    check_out,
    clear_out,
    clear_stale_temps,
    locked_temp,
    open_source,
    remove_made,
    write_fix,
)

_MIXER = {"in_proj.weight": "ssm_in.weight", "conv1d.weight": "ssm_conv1d.weight",
          "conv1d.bias": "ssm_conv1d.bias", "x_proj.weight": "ssm_x.weight",
          "dt_proj.weight": "ssm_dt.weight", "dt_proj.bias": "ssm_dt.bias", "A_log": "ssm_a",
          "D": "ssm_d", "out_proj.weight": "ssm_out.weight"}
NEVER_MERGED = "\u00c0 \u00c0"  # bytes 0xC0 0xC0: never in valid UTF-8


def gguf_tensors(params: dict[str, np.ndarray], n_layer: int) -> dict[str, np.ndarray]:
    """Our parameters under llama.cpp's names and layouts (float32)."""
    out = {"token_embd.weight": params[EMBEDDINGS]}
    for i in range(n_layer):
        pre = f"backbone.layers.{i}."
        out[f"blk.{i}.attn_norm.weight"] = params[pre + "norm.weight"]
        for ours, theirs in _MIXER.items():
            a = params[pre + "mixer." + ours]
            if ours == "A_log":
                a = -np.exp(a.astype(np.float64))
            elif ours == "conv1d.weight":
                a = a[:, 0, :]
            out[f"blk.{i}.{theirs}"] = a
    out["output_norm.weight"] = params[NORM_F]
    if LM_HEAD in params:
        out["output.weight"] = params[LM_HEAD]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def _vocab(run: RunSource) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) padded to the model's vocabulary."""
    import gguf

    tok = run.lm.tokenizer
    if isinstance(tok, BPETokenizer):
        spec = json.loads(tok._tok.to_str())
        vocab = spec["model"]["vocab"]
        merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
        added = {t["id"]: t for t in spec.get("added_tokens", [])}
    else:
        spec = byte_tokenizer_json()
        vocab, merges = spec["model"]["vocab"], []
        added = {t["id"]: t for t in spec["added_tokens"]}
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(run.lm.config.vocab_size):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(gguf.TokenType.CONTROL if added[i]["special"] else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    return tokens, [int(t) for t in types], merges or [NEVER_MERGED]


def export_gguf(src_folder: str | Path, out_path: str | Path, force: bool = False) -> list[str]:
    """Write ``out_path`` (.gguf, float32) from a run folder; an existing file is replaced only
    with ``force``. Returns notices (a parent folder created, a corrupt latest snapshot passed
    over for an older one)."""
    try:
        import gguf
    except ImportError:
        raise CheckpointError("the gguf package is not installed; pip install gguf") from None
    given = Path(out_path)  # a link: the file it points to is replaced, as writing through it
    out_path = resolved(given) if given.is_symlink() else given  # would (check_out refuses a
    clear_stale_temps(out_path)  # dangling one); temps first: an export refused for want of
    notes = check_out(src_folder, given, file=True, force=force)  # --force kept 23 MB of them
    run = open_source(src_folder)
    made = clear_out(out_path)
    replacing = out_path.exists()  # an earlier GGUF export, which check_out let --force replace
    try:
        with locked_temp(out_path) as tmp:
            _write(gguf, run, out_path, tmp)
            try:
                _publish(Path(tmp), out_path, replacing)
            finally:
                Path(tmp).unlink(missing_ok=True)  # (published: a link, or renamed away)
    except BaseException:
        remove_made(made)  # (the folders made for it: it said nothing new was written)
        raise
    return notes + run.notices


def _publish(tmp: Path, out_path: Path, replacing: bool) -> None:
    """``tmp`` becomes ``out_path``: replacing the earlier export checked, else only where no file
    is there yet (two exports to one new name at once both said "wrote"; the later had silently
    replaced the earlier): a hard link, which a file made meanwhile refuses."""
    if replacing:
        os.replace(tmp, out_path)
        return
    try:
        os.link(tmp, out_path)
        return
    except FileExistsError:
        pass
    except OSError:  # a filesystem without hard links (FAT): as close as a rename can come
        if not out_path.exists():
            os.replace(tmp, out_path)
            return
    raise CheckpointError(f"{out_path}: written by another export meanwhile; export into a new "
                          "file name")


def _write(gguf: Any, run: RunSource, out_path: Path, tmp: str) -> None:
    """The GGUF file of ``run`` written to ``tmp`` (``out_path`` names it inside)."""
    cfg = run.lm.config
    try:
        w = gguf.GGUFWriter(tmp, "mamba")
        w.add_name(out_path.stem)
        w.add_context_length(1 << 20)  # a recurrent model has no context limit; llama.cpp wants one
        w.add_embedding_length(cfg.d_model)
        w.add_feed_forward_length(0)
        w.add_head_count(0)
        w.add_block_count(cfg.n_layer)
        w.add_ssm_conv_kernel(cfg.d_conv)
        w.add_ssm_inner_size(cfg.d_inner)
        w.add_ssm_state_size(cfg.d_state)
        w.add_ssm_time_step_rank(int(cfg.dt_rank))
        w.add_layer_norm_rms_eps(cfg.norm_eps)
        w.add_ssm_dt_b_c_rms(False)
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
        tokens, types, merges = _vocab(run)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        eos = run.lm.tokenizer.eos_id
        w.add_bos_token_id(eos)
        w.add_eos_token_id(eos)
        w.add_pad_token_id(eos)
        w.add_add_bos_token(True)  # bos = end of text: a prompt is read after it, as every
        # training document starts (``MambaLM.prompt_ids``); llama.cpp puts it first
        w.add_add_eos_token(False)
        for name, a in gguf_tensors(run.lm.params, cfg.n_layer).items():
            w.add_tensor(name, a)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    except OSError as exc:  # numpy's short write says only "2048 requested and 1344 written"
        Path(tmp).unlink(missing_ok=True)
        why = exc.strerror or "the disk took only part of it"
        need = sum(a.nbytes for a in run.lm.params.values())
        raise CheckpointError(f"{out_path}: cannot write the GGUF file ({why}); "
                              f"{write_fix(out_path, exc, need)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
