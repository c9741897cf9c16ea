"""``eval RUN CORPUS`` splits CORPUS into documents as the run was trained (its records mode and
row length), unless --records / --seq-len say otherwise."""

from pathlib import Path

from engine.cli import main
from engine.data import encode_corpus, load_corpus
from engine.documents import encode_documents
from engine.evaluation import evaluate
from engine.packing import line_end_table, pack_spans
from engine.run import RunSpec, load_model, start
from engine.trainer import TrainConfig


def _loss_line(capsys) -> str:  # noqa: ANN001
    return capsys.readouterr().out.split("  ")[0]  # "loss X.XXXX"


def test_eval_of_a_line_records_run_splits_the_corpus_by_line(tmp_path: Path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"item {i} costs {i * 7 % 13} coins\n" for i in range(200)))
    spec = RunSpec(preset="tiny", records="line", autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=48, epochs=1, max_steps=3))
    with start(spec, [corpus], out=tmp_path / "r") as run:
        run.train()
    lm = load_model(tmp_path / "r")
    c = load_corpus([corpus])
    docs = encode_documents(c, lm.tokenizer, "line")
    by_line = evaluate(lm, pack_spans(docs.ids, docs.spans(), 48, line_end_table(lm.tokenizer)), 48)
    stream = evaluate(lm, encode_corpus(c, lm.tokenizer), 48)
    assert f"{by_line.loss:.4f}" != f"{stream.loss:.4f}"

    assert main(["eval", str(tmp_path / "r"), str(corpus)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"loss {by_line.loss:.4f}") and "line records, as the run was trained" in out
    assert main(["eval", str(tmp_path / "r"), str(corpus), "--records", "stream"]) == 0
    assert _loss_line(capsys) == f"loss {stream.loss:.4f}"
    snap = next((tmp_path / "r" / "snapshots").iterdir())  # a snapshot of the run: the same split
    assert main(["eval", str(snap), str(corpus)]) == 0
    assert "line records, as the run was trained" in capsys.readouterr().out
