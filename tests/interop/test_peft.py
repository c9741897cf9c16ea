"""PEFT: our adapters, un-merged and merged, against our own LoRA forward; the per-target table
(engine.export.peft.PEFT_SUPPORT) shown to users is re-measured here on this transformers line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine import MambaLM
from engine.export import PEFT_SUPPORT, export_peft
from engine.lora import LORA_TARGETS, LoRAConfig

from .conftest import LINE, TEXT, model_folder, torch, train_run

peft = pytest.importorskip("peft")


@pytest.fixture(scope="module")
def lora_runs(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One LoRA run per target (and in_proj+A_log, in_proj+x_proj) over the byte run."""
    root = tmp_path_factory.mktemp("lora")
    out = {}
    for targets in [(t,) for t in LORA_TARGETS] + [("in_proj", "A_log"), ("in_proj", "x_proj")]:
        name = "+".join(targets)
        train_run(root / name / "run", steps=6, lora=LoRAConfig(targets, rank=4), init=runs["byte"])
        out[name] = root / name / "run"
    return out


def _ours(run: Path, ids: np.ndarray) -> np.ndarray:
    """Our LoRA forward: the run's weights are the adapted (merged) model."""
    return MambaLM.load(model_folder(run)).logits(ids[None])[0].astype(np.float64)


def _write_adapter(run: Path, out: Path) -> None:
    """The PEFT files of a run, whatever its targets (export_peft refuses the broken ones)."""
    from engine import checkpoint as ckpt
    from engine.export.source import open_source

    src = open_source(run)
    assert src.lora is not None
    ckpt.save_model_files(out / "base", src.lm.config, src.lora.params, src.lm.tokenizer)
    src.lora.save_adapter(out, base_model=str((out / "base").resolve()))


def _logits(model, ids: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        return model(torch.as_tensor(ids)[None]).logits[0].double().numpy()


def _measure(run: Path, out: Path, ids: np.ndarray) -> str:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    _write_adapter(run, out)
    base = AutoModelForCausalLM.from_pretrained(str(out / "base")).eval()
    plain = _logits(base, ids)
    try:
        model = PeftModel.from_pretrained(base, str(out)).eval()
    except Exception:  # PEFT raises ValueError / its own error classes
        return "refused"
    y, ours = _logits(model, ids), _ours(run, ids)
    if np.abs(y - ours).max() < 1e-5:
        return "exact"
    if np.abs(y - plain).max() < 1e-6:
        return "bypassed"
    return "partial"


@pytest.mark.parametrize("target", LORA_TARGETS)
def test_peft_support_table_is_what_peft_does(lora_runs: dict[str, Path], tmp_path: Path,
                                               target: str) -> None:
    ids = MambaLM.load(model_folder(lora_runs[target])).tokenizer.encode(TEXT[:120])
    measured = _measure(lora_runs[target], tmp_path / "alone", ids)
    if target == "A_log":  # alone it raises; beside another target PEFT silently drops it
        assert measured == "refused"
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        run = lora_runs["in_proj+A_log"]
        _write_adapter(run, tmp_path / "pair")
        base = AutoModelForCausalLM.from_pretrained(str(tmp_path / "pair" / "base")).eval()
        y = _logits(PeftModel.from_pretrained(base, str(tmp_path / "pair")).eval(), ids)
        assert np.abs(y - _ours(run, ids)).max() > 1e-4  # A_log's adapter is missing
        measured = "dropped"
    assert measured == PEFT_SUPPORT[target][LINE], f"{target} on transformers {LINE}: {measured}"


@pytest.mark.parametrize("target", ["in_proj", "x_proj", "dt_proj", "embeddings"])
def test_peft_merged_equals_our_lora_forward(lora_runs: dict[str, Path], tmp_path: Path,
                                             target: str) -> None:
    """For every target PEFT accepts, merge_and_unload gives our model (the merged route)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = lora_runs[target]
    ids = MambaLM.load(model_folder(run)).tokenizer.encode(TEXT[:120])
    _write_adapter(run, tmp_path)
    base = AutoModelForCausalLM.from_pretrained(str(tmp_path / "base")).eval()
    merged = PeftModel.from_pretrained(base, str(tmp_path)).merge_and_unload().eval()
    assert np.abs(_logits(merged, ids) - _ours(run, ids)).max() < 1e-5


@pytest.mark.parametrize("target", ["in_proj", "x_proj", "dt_proj"])
def test_peft_unmerged_equals_our_lora_forward_where_the_table_says_exact(
        lora_runs: dict[str, Path], tmp_path: Path, target: str) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if PEFT_SUPPORT[target][LINE] != "exact":
        pytest.skip(f"{target} is {PEFT_SUPPORT[target][LINE]} on transformers {LINE}")
    run = lora_runs[target]
    ids = MambaLM.load(model_folder(run)).tokenizer.encode(TEXT[:120])
    _write_adapter(run, tmp_path)
    base = AutoModelForCausalLM.from_pretrained(str(tmp_path / "base")).eval()
    y = _logits(PeftModel.from_pretrained(base, str(tmp_path)).eval(), ids)
    assert np.abs(y - _ours(run, ids)).max() < 1e-5


def test_exported_adapter_loads_with_auto_peft_model(lora_runs: dict[str, Path], tmp_path: Path) -> None:
    """export_peft as users load it: AutoPeftModelForCausalLM follows base_model_name_or_path to
    the unmerged base; the adapter applied once gives our model."""
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoTokenizer

    run = lora_runs["in_proj+x_proj"]
    notes = export_peft(run, tmp_path / "adapter")
    assert notes == []
    model = AutoPeftModelForCausalLM.from_pretrained(str(tmp_path / "adapter")).eval()
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "adapter"))
    ids = np.asarray(tok(TEXT[:120]).input_ids)
    assert np.abs(_logits(model, ids) - _ours(run, ids)).max() < 1e-5


def test_export_peft_refuses_targets_peft_never_applies(lora_runs: dict[str, Path], tmp_path: Path) -> None:
    from engine.errors import CheckpointError

    with pytest.raises(CheckpointError, match="use the merged export"):
        export_peft(lora_runs["embeddings"], tmp_path / "x")
