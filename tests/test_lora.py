import json

import numpy as np
import pytest

from engine import LoRAConfig, LoRATrainable, MambaLM, TrainConfig, Trainer, load_adapter
from engine import reference as ref
from engine.model import loss_and_grad
from engine.params import short_name, zeros_like
from engine.tokenizer import ByteTokenizer
from tests.gradcheck import numeric_grad
from tests.helpers import random_batch, random_params, tiny_config

ALL = ("in_proj", "x_proj", "dt_proj", "out_proj", "conv1d", "A_log", "embeddings")


def test_step_zero_leaves_outputs_unchanged():
    cfg = tiny_config()
    p = random_params(cfg, dtype=np.float32)
    tokens, _ = random_batch(cfg)
    before = ref.mamba_forward(p, tokens, cfg)
    lt = LoRATrainable(p, LoRAConfig(ALL, rank=4))
    lt.merge()
    np.testing.assert_array_equal(ref.mamba_forward(p, tokens, cfg), before)


def test_adapter_gradients_match_finite_differences_through_the_model():
    cfg = tiny_config()
    p = random_params(cfg, seed=2)
    tokens, targets = random_batch(cfg, seed=3)
    lt = LoRATrainable(p, LoRAConfig(ALL, rank=2, alpha=3.0))
    rng = np.random.default_rng(0)
    for ad in lt.adapters.values():  # B = 0 would make dA identically zero
        ad.B[...] = 0.1 * rng.standard_normal(ad.B.shape)
    lt.merge()
    g = zeros_like(p)
    loss_and_grad(p, tokens, targets, cfg, g, 1.0 / targets.size)
    grads = lt.grads(g)

    def loss() -> float:
        lt.merge()
        return ref.mamba_loss(p, tokens, targets, cfg)

    for name, tensor in lt.tensors.items():
        idx, num = numeric_grad(loss, tensor, eps=1e-6, max_points=4, rng=rng)
        assert np.abs(grads[name]).max() > 0, name
        np.testing.assert_allclose(grads[name].reshape(-1)[idx], num, rtol=1e-5, atol=1e-9,
                                   err_msg=name)


def _lm():
    return MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer(), seed=4)


def _ids(n=600):
    return np.tile(np.frombuffer(b"hello lora world, ", np.uint8).astype(np.int64), n // 18 + 1)[:n]


def test_training_freezes_every_base_tensor_and_reports_before_training():
    lm = _lm()
    frozen = {k: v.copy() for k, v in lm.params.items()}
    tr = Trainer(lm, _ids(), _ids()[:0], TrainConfig(batch_size=2, seq_len=16, max_steps=5,
                                                      lora=LoRAConfig(("in_proj", "dt_proj"), 8)))
    lt = tr.trainable
    assert isinstance(lt, LoRATrainable)
    assert len(lt.adapters) == 4  # 2 layers x 2 targets
    assert tr.trainable_count() == sum(a.size for a in lt.tensors.values())
    assert tr.optimizer.state_bytes() == 2 * 4 * tr.trainable_count()
    assert any("rank clamped to 1" in n for n in lt.notices)  # dt_proj is (32, 1)
    assert "LoRA r=8: 4 modules adapted" in lt.describe()
    tr.run()
    lt.unmerge()
    for k in lm.params:
        np.testing.assert_array_equal(lm.params[k], frozen[k], err_msg=k)
    lt.merge()
    changed = [k for k in lm.params if not np.array_equal(lm.params[k], frozen[k])]
    assert changed and all(short_name(k) in ("in_proj", "dt_proj") for k in changed)


def test_a_clamped_rank_is_in_the_peft_rank_pattern(tmp_path):
    """dt_proj (32 x 1) takes rank 1 of the asked 8: PEFT builds rank 8 without rank_pattern
    and the adapter's tensors would not load; our own loader reads the shapes."""
    lm = _lm()
    tr = Trainer(lm, _ids(), _ids()[:0], TrainConfig(batch_size=2, seq_len=16, max_steps=1,
                                                      lora=LoRAConfig(("in_proj", "dt_proj"), 8)))
    tr.trainable.save_adapter(tmp_path / "a", base_model="base")
    conf = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert conf["r"] == 8 and conf["rank_pattern"] == {"dt_proj": 1}


def test_every_lora_problem_is_named_at_once():
    """LoRAConfig and adapter_config.json named the first problem only."""
    with pytest.raises(ValueError) as info:
        LoRAConfig(("x_proj",), rank=0, dropout=2.0)
    assert "rank = 0" in str(info.value) and "dropout = 2.0" in str(info.value)


def test_unknown_target_is_an_error():
    with pytest.raises(ValueError, match=r"LoRA: unknown target\(s\) \[.q_proj.\]"):
        LoRAConfig(("q_proj",))


def test_peft_export_merged_export_and_unmerge(tmp_path):
    lm = _lm()
    base = {k: v.copy() for k, v in lm.params.items()}
    tr = Trainer(lm, _ids(), _ids()[:0], TrainConfig(
        batch_size=2, seq_len=16, max_steps=4, lr=1e-2,
        lora=LoRAConfig(("in_proj", "x_proj", "out_proj", "embeddings"), 4, alpha=8.0)))
    tr.run()
    lt = tr.trainable
    warnings = lt.save_adapter(tmp_path / "adapter", base_model="base")
    assert any("out_proj" in w for w in warnings)
    conf = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert conf["peft_type"] == "LORA" and conf["r"] == 4 and conf["lora_alpha"] == 8.0
    from safetensors.numpy import load_file

    keys = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    a = keys["base_model.model.backbone.layers.0.mixer.in_proj.lora_A.weight"]
    b = keys["base_model.model.backbone.layers.0.mixer.in_proj.lora_B.weight"]
    assert a.shape == (4, 16) and b.shape == (64, 4)
    assert keys["base_model.model.backbone.embeddings.lora_embedding_A"].shape == (4, 264)
    assert keys["base_model.model.backbone.embeddings.lora_embedding_B"].shape == (16, 4)
    lm.save(tmp_path / "merged")  # merged full checkpoint
    merged = MambaLM.load(tmp_path / "merged").params
    name = "backbone.layers.0.mixer.in_proj.weight"
    np.testing.assert_allclose(merged[name], base[name] + 2.0 * (b @ a), rtol=1e-6, atol=1e-7)
    fresh = {k: v.copy() for k, v in base.items()}  # load the adapter onto the base
    loaded = load_adapter(fresh, tmp_path / "adapter")
    for name, ad in loaded.adapters.items():  # what an optimizer would update is what was loaded
        assert loaded.tensors[name + "::lora_A"] is ad.A and loaded.tensors[name + "::lora_B"] is ad.B
    for k in merged:
        np.testing.assert_allclose(fresh[k], merged[k], rtol=1e-6, atol=1e-7, err_msg=k)
    loaded.unmerge()
    for k in base:
        np.testing.assert_array_equal(fresh[k], base[k])


def test_dropout_gradients_match_finite_differences_and_masks_are_reproducible():
    cfg = tiny_config()
    p = random_params(cfg, seed=7)
    tokens, targets = random_batch(cfg, seed=8)
    lt = LoRATrainable(p, LoRAConfig(("in_proj", "x_proj", "dt_proj", "out_proj", "embeddings"),
                                     rank=2, alpha=2.0, dropout=0.3, seed=5))
    rng = np.random.default_rng(1)
    for ad in lt.adapters.values():
        ad.B[...] = 0.2 * rng.standard_normal(ad.B.shape)
    lt.merge()

    def loss() -> float:
        lt.merge()
        ls, n = loss_and_grad(p, tokens, targets, cfg, None, 1.0, hooks=lt.dropout_hooks(3, 0))
        return ls / n

    g = zeros_like(p)
    loss_and_grad(p, tokens, targets, cfg, g, 1.0 / targets.size, hooks=lt.dropout_hooks(3, 0))
    grads = lt.grads(g)
    no_drop = ref.mamba_loss(p, tokens, targets, cfg)
    assert loss() != no_drop  # dropout changes the training loss...
    assert loss() == loss()  # ...with the same mask for the same (step, micro-batch)
    for name, tensor in lt.tensors.items():
        idx, num = numeric_grad(loss, tensor, eps=1e-6, max_points=3, rng=rng)
        np.testing.assert_allclose(grads[name].reshape(-1)[idx], num, rtol=1e-5, atol=1e-9,
                                   err_msg=name)
    # checkpointing recomputes the same masks: identical gradients
    g1, g2 = zeros_like(p), zeros_like(p)
    loss_and_grad(p, tokens, targets, cfg, g1, 1.0, hooks=lt.dropout_hooks(4, 1))
    a = lt.grads(g1)
    loss_and_grad(p, tokens, targets, cfg, g2, 1.0, checkpoint=True, hooks=lt.dropout_hooks(4, 1))
    b = lt.grads(g2)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-15)
    # a micro-batch run as two halves (two threads in training: each half's terms gathered
    # apart, ``part``) draws the rows of the whole's masks: the whole's gradients
    h = tokens.shape[0] // 2
    g3 = zeros_like(p)
    loss_and_grad(p, tokens[:h], targets[:h], cfg, g3, 1.0, hooks=lt.dropout_hooks(4, 1, 0, 0))
    loss_and_grad(p, tokens[h:], targets[h:], cfg, g3, 1.0,
                  hooks=lt.dropout_hooks(4, 1, 1, h * tokens.shape[1]))
    halves = lt.grads(g3)
    for k in a:
        np.testing.assert_allclose(halves[k], a[k], rtol=1e-10, atol=1e-13, err_msg=k)


def test_dropout_training_run_and_invalid_rate():
    lm = _lm()
    tr = Trainer(lm, _ids(), _ids()[:0], TrainConfig(batch_size=2, seq_len=16, max_steps=3,
                                                      lora=LoRAConfig(("in_proj",), 4, dropout=0.1)))
    tr.run()
    assert all(np.isfinite(r.loss) for r in tr.history)
    with pytest.raises(ValueError, match="dropout"):
        LoRAConfig(("in_proj",), dropout=1.0)


def test_low_rank_adapter_gradients_equal_the_projected_full_gradient():
    """The trainer's path (no dW for frozen projections, adapter grads from (dy, x) low-rank
    products) gives the same adapter gradients as projecting the full merged-weight gradient.
    150 rows: the products run in blocks of 128 (with 14 rows a second block was never tested,
    and one block alone passed)."""
    cfg = tiny_config()
    p = random_params(cfg, seed=5, dtype=np.float32)
    tokens, targets = random_batch(cfg, b=3, length=50, seed=6)
    lt = LoRATrainable(p, LoRAConfig(ALL, rank=3, alpha=5.0))
    rng = np.random.default_rng(2)
    for ad in lt.adapters.values():
        ad.B[...] = 0.1 * rng.standard_normal(ad.B.shape)
    lt.merge()
    full = zeros_like(p)
    loss_and_grad(p, tokens, targets, cfg, full, 1.0 / targets.size)
    want = lt.grads(full)
    needed = {n: np.zeros_like(p[n]) for n in lt.needs()}
    assert not any(short_name(n) in ("in_proj", "x_proj", "dt_proj", "out_proj") for n in needed)
    loss_and_grad(p, tokens, targets, cfg, needed, 1.0 / targets.size, hooks=lt.dropout_hooks(0, 0))
    got = lt.grads(needed)
    assert set(got) == set(want) == set(lt.tensors)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=1e-6, err_msg=k)


def test_generate_and_load_model_open_a_peft_export(tmp_path, capsys):
    """A walk-through's ``generate EXPORT`` on a PEFT export said "no config.json (not a model
    folder)": the folder now loads as its base with the adapter merged, equal to the run."""
    from engine.cli import main
    from engine.export import export_peft
    from engine.run import RunSpec, load_model, start

    (tmp_path / "c.txt").write_text("the quick brown fox jumps over the lazy dog. " * 60)
    spec = RunSpec(model={"d_model": 16, "n_layer": 2, "d_state": 4},
                   train=TrainConfig(epochs=1, batch_size=2, seq_len=16, max_steps=3, lr=1e-2,
                                     warmup_steps=0, lora=LoRAConfig(("in_proj", "x_proj"), rank=2)))
    with start(spec, [tmp_path / "c.txt"], out=tmp_path / "run") as run:
        run.train()
    export_peft(tmp_path / "run", tmp_path / "p")
    trained, loaded = load_model(tmp_path / "run"), load_model(tmp_path / "p")
    for n, a in trained.params.items():
        np.testing.assert_allclose(loaded.params[n], a, rtol=1e-6, atol=1e-6, err_msg=n)
    assert main(["generate", str(tmp_path / "p"), "--prompt", "the", "--max-new-tokens", "4",
                 "--seed", "0"]) == 0
    # moved without its base/ and naming a base that is not a local folder: one line, the fix
    (tmp_path / "p" / "base").rename(tmp_path / "elsewhere")
    conf = json.loads((tmp_path / "p" / "adapter_config.json").read_text())
    conf["base_model_name_or_path"] = "state-spaces/mamba-130m-hf"
    (tmp_path / "p" / "adapter_config.json").write_text(json.dumps(conf))
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "p"), "--prompt", "the"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a local model folder" in err and "--merged" in err
