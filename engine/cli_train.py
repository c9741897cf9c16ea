"""``python -m engine train``: a new run, or ``--resume`` of one, from the command line (flags
and ``--config`` made into a ``RunSpec``; its progress line, samples, TensorBoard events and
the final save). ``engine.cli`` builds the parser and routes here."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .cliout import PROGRESS, terminal_safe
from .defaults import PRESET_DEFAULTS, SAMPLE_CORPUS
from .errors import CorpusError, MambaStudioError, one_line
from .reports import format_duration
from .safeio import resolved
from .words import plural

if TYPE_CHECKING:
    from .distributed_run import DistributedJob
    from .run import Run
    from .runspec import RunSpec
    from .trainer import EpochReport, StepReport

RANK_TIMEOUT_S = 300.0  # train --distributed: silence from another rank that ends the job


def _progress(report: StepReport) -> None:
    frac = report.step / max(report.total_steps, 1)
    bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
    flag = " NaN-skipped" if report.nonfinite else ""
    PROGRESS.text = (
        f"[{bar}] {report.step}/{report.total_steps} ep {report.epoch + 1} loss {report.loss:.4f} "
        f"gnorm {report.grad_norm:.3f} lr {report.lr:.2e} {report.tokens_per_s:,.0f} tok/s "
        f"ETA {format_duration(report.eta_s)}{flag}")
    PROGRESS.write(PROGRESS.text, force=report.step >= report.total_steps)


def _evaluating(step: int) -> None:
    """The progress line while the held-out set is scored (seconds on a big one: the bar stood
    at its last step with nothing said). It scores the weights after ``step``, which the bar
    shows once the scoring is done (it read as the bar's step being scored)."""
    if PROGRESS.text:
        PROGRESS.write(f"{PROGRESS.text} | scoring the held-out set at step {step:,}...",
                       force=True)


# train flags that map onto RunSpec / TrainConfig fields (their defaults come from RunSpec())
_TRAIN_FLAGS = {"epochs": "epochs", "lr": "lr", "batch": "batch_size", "seq_len": "seq_len",
                "accum": "grad_accum", "warmup": "warmup_steps", "weight_decay": "weight_decay",
                "clip": "max_grad_norm", "seed": "seed", "max_steps": "max_steps",
                "eval_every": "eval_every"}
_RUN_FLAGS = {"preset": "preset", "tokenizer": "tokenizer", "bpe_vocab": "bpe_vocab",
              "init": "init", "init_scheme": "init_scheme", "holdout": "holdout",
              "records": "records", "autosave_steps": "autosave_steps",
              "autosave_minutes": "autosave_minutes"}


def _spec(a: argparse.Namespace) -> RunSpec:
    """The RunSpec of a new run: the preset's defaults with the flags given; with --config, the
    file's settings with each flag given on top, setting by setting (``overlay_settings``, as
    the window opens a file): --preset over a file's preset moves each training setting at
    the old preset's default value to the new one's, --lora over a file's LoRA keeps its rank,
    and the file's wsla / activation checkpointing stay unless the flag is given (they were
    dropped)."""
    from dataclasses import replace

    from .earlystop import EarlyStopping
    from .lora import LoRAConfig
    from .runspec import RunSpec
    from .runtoml import RunSettings, overlay_settings
    from .trainer import TrainConfig

    file = _settings(a) if a.config else None
    knobs = {k: v for k, v in (("rank", a.lora_rank), ("alpha", a.lora_alpha),
                                ("dropout", a.lora_dropout)) if v is not None}
    if knobs and not a.lora and (file is None or file.spec.train.lora is None):
        raise ValueError(f"--lora-{next(iter(knobs))} needs --lora (the projections it adapts, "
                         "e.g. --lora in_proj,x_proj)")  # (taken without a word, used by nothing)
    preset = a.preset or (file.spec.preset if file else RunSpec.preset)
    train = {f: getattr(a, k) for k, f in _TRAIN_FLAGS.items() if getattr(a, k) is not None}
    named = [f"train.{f}" for f in train]
    if a.checkpointing:
        train["activation_checkpointing"] = True
        named.append("train.activation_checkpointing")
    if a.wsla:
        train["wsla"] = True
        named.append("train.wsla")
    if a.lora or knobs:
        targets = tuple(a.lora.split(",")) if a.lora else LoRAConfig.targets
        train["lora"] = replace(LoRAConfig(targets), **knobs)
        named += (["train.lora.targets"] if a.lora else []) + [f"train.lora.{k}" for k in knobs]
    run = {f: getattr(a, k) for k, f in _RUN_FLAGS.items() if getattr(a, k) is not None}
    named += [f"run.{f}" for f in run]
    if a.prompt is not None:
        run["prompts"] = (a.prompt,)
        named.append("run.prompts")
    early = _early_flags(a, EarlyStopping())
    named += [f"early_stopping.{k}" for k, v in (("patience", a.patience),
                                                 ("target_loss", a.target_loss)) if v is not None]
    no_limit = train.get("max_steps") == 0  # --max-steps 0: no limit
    if no_limit:
        train["max_steps"] = None
    run["preset"] = preset
    flags = RunSpec(**run, train=TrainConfig.for_preset(preset, **train)
                    if preset in PRESET_DEFAULTS else TrainConfig(**train), early_stopping=early)
    if file is None:
        return flags
    if a.preset and file.spec.model:  # (the file's [model] sizes went without a word)
        if a.preset == file.spec.preset:  # the file's own preset: nothing to change
            named.remove("run.preset")
        else:
            sizes = ", ".join(f"{k} {v}" for k, v in file.spec.model.items())
            print(f"note: --preset {a.preset} replaces the model sizes {a.config} gives "
                  f"({sizes}) with {a.preset}'s", file=sys.stderr)
    spec = overlay_settings(file, RunSettings(flags, (), tuple(named)),
                            f"{a.config} with the flags given").spec
    return replace(spec, train=replace(spec.train, max_steps=None)) if no_limit else spec


def _early_flags(a: argparse.Namespace, early):
    """``early`` (an EarlyStopping) with --patience / --target-loss over it, each on its own
    (--patience dropped a file's target loss); --target-loss 0 turns the target off."""
    from dataclasses import replace

    if a.patience is not None:
        early = replace(early, patience=a.patience)
    if a.target_loss is not None:
        early = replace(early, target_loss=a.target_loss or None)
    return early


def _settings(a: argparse.Namespace):
    """The --config file (engine.runtoml), read once."""
    if getattr(a, "_settings", None) is None:
        from .runtoml import load_settings

        a._settings = load_settings(a.config)
        if not a._settings.named:  # (an emptied or all-comment file trained on defaults unsaid)
            print(f"note: {a.config} names no settings (empty, or comments only): it changes "
                  "nothing", file=sys.stderr)
    return a._settings


def _open_for_training(a: argparse.Namespace):
    from .run import read_run_spec, resume, start
    from .runspec import RESUME_OVERRIDES

    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if not a.resume:
        spec = _spec(a)
        if a.export_adapter:  # before the run is made (a resumed run's: once it is open)
            _check_adapter_export(spec.train.lora.targets if spec.train.lora else None)
        corpus = a.corpus or (list(_settings(a).corpus) if a.config else [])
        if not corpus:  # (it trained on them without a word; eval says so too)
            say(f"note: no corpus given; training on the bundled sample corpus ({SAMPLE_CORPUS})")
            corpus = [SAMPLE_CORPUS]
        try:
            run = start(spec, corpus, out=a.out, force=a.force, progress=say)
        except CorpusError as exc:
            if a.corpus or not a.config:
                raise
            raise CorpusError(f"{exc}, named by run.corpus in {a.config}") from None
        if run.spec.init and a.preset:  # its training settings apply, not its model sizes
            say(f"note: --preset {a.preset} sets the training settings only; the model's shape "
                f"is {run.spec.init}'s (d_model {run.lm.config.d_model}, "
                f"{run.lm.config.n_layer} layers)")
        if a.bpe_vocab is not None and run.spec.init:
            say(f"note: --bpe-vocab not used: a run from {run.spec.init} keeps that model's "
                f"{run.spec.tokenizer} tokenizer")
        elif a.bpe_vocab is not None and run.spec.tokenizer != "bpe":
            say(f"note: --bpe-vocab not used: the tokenizer is {run.spec.tokenizer}"
                + (" (auto: bytes below 4 MB of corpus; --tokenizer bpe to choose BPE)"
                   if spec.tokenizer == "auto" else ""))
        say(f"run folder: {run.folder}")
        return run
    given = {f: getattr(a, k) for k, f in {**_TRAIN_FLAGS, **_RUN_FLAGS}.items()
             if getattr(a, k) is not None}
    if a.prompt is not None:  # a new preview prompt, kept in run.json from now on
        given["prompts"] = (a.prompt,)
    if a.config:  # its settings were ignored without a word, and a bad file was found late
        for k, v in _config_changes(a).items():
            given.setdefault(k, v)  # a flag wins over the file
    try:
        own = read_run_spec(a.resume)
    except MambaStudioError:
        own = None  # (the resume says what is wrong with it, not "batch_size cannot change")
    if a.patience is not None or a.target_loss is not None:  # over the run's own (or the file's)
        given["early_stopping"] = _early_flags(a, given.get("early_stopping") or (
            own or read_run_spec(a.resume)).early_stopping)  # (unread: its error, now)
    if own is not None:  # the run's command line again, --resume added: its own values stay
        given = {k: v for k, v in given.items()
                 if k in RESUME_OVERRIDES or not _the_runs_own(own, k, v)}
    fixed = sorted(k for k in given if k not in RESUME_OVERRIDES)
    fixed += _adapter_changes(a, own)
    if fixed:  # (--checkpointing was called "LoRA/WSLA")
        if own is None:
            read_run_spec(a.resume)  # what is wrong with its run.json, said first
        raise ValueError(f"--resume continues a run with its own settings; {', '.join(fixed)} "
                         f"cannot change (only {', '.join(RESUME_OVERRIDES)} can)")
    if a.out is not None and resolved(a.out) != resolved(a.resume):
        raise ValueError("--resume writes into the run folder itself; drop --out")
    if a.corpus:
        say("note: the corpus arguments are ignored; a resumed run trains on its saved token ids")
    elif a.config and _settings(a).corpus:  # the file's corpus was ignored without a word
        say(f"note: the corpus of {a.config} is ignored; a resumed run trains on its saved token "
            "ids")
    run = resume(a.resume, **given)
    say(f"resumed {run.folder} at step {run.step} of {run.trainer.total_steps}")
    return run


def _the_runs_own(own: RunSpec, field: str, value: object) -> bool:
    """Whether a flag given with --resume holds the run's own value of ``field`` (a RunSpec or
    TrainConfig field) in ``own``, its run.json: the run's command line again with --resume
    added was refused as changing them ("batch_size cannot change" of the run's own batch; a
    tokenizer of ``auto``, which run.json keeps as what it chose; an --init spelled another
    way)."""
    from dataclasses import fields

    from .trainer import TrainConfig

    if field == "tokenizer" and value == "auto":  # (the run's own choice is its auto's)
        return True
    if field == "bpe_vocab" and own.tokenizer == "bytes":  # not used by a bytes run (a new
        return True                                        # run says so in a note)
    if field == "init" and own.init is not None and value is not None:
        try:
            return os.path.samefile(str(value), own.init)
        except OSError:
            return str(value) == own.init
    where = own.train if field in {f.name for f in fields(TrainConfig)} else own
    return hasattr(where, field) and getattr(where, field) == value


def _adapter_changes(a: argparse.Namespace, own: RunSpec | None) -> list[str]:
    """The LoRA / WSLA / checkpointing flags given with --resume that differ from the run's own
    (``own``; None: unread, each flag given counts): they were refused whenever given, the run's
    own --lora or --checkpointing too."""
    train = own.train if own is not None else None
    lora = train.lora if train is not None else None
    same = {"checkpointing": train is not None and train.activation_checkpointing,
            "wsla": train is not None and train.wsla,
            "lora": lora is not None and tuple(str(a.lora or "").split(",")) == lora.targets,
            "lora_rank": lora is not None and a.lora_rank == lora.rank,
            "lora_alpha": lora is not None and a.lora_alpha == lora.alpha,
            "lora_dropout": lora is not None and a.lora_dropout == lora.dropout}
    given = {f: getattr(a, f) is not None for f in ("lora", "lora_rank", "lora_alpha",
                                                    "lora_dropout")}  # (0 was never compared:
    given |= {f: bool(getattr(a, f)) for f in ("checkpointing", "wsla")}  # --lora-dropout 0)
    return [f for f in same if given[f] and not same[f]]


def _config_changes(a: argparse.Namespace) -> dict[str, object]:
    """With --resume: the settings the --config file names whose value differs from the run's
    own (run.json), by RunSpec/TrainConfig field (the corpus is not the run's: its token ids
    are); the early stopping keys it names go over the run's, as ``early_stopping``."""
    from dataclasses import replace

    from .defaults import BPE_MIN_BYTES
    from .run import read_run_spec
    from .runtoml import RunSettings, early_stopping_over, flat_settings

    s = _settings(a)  # checked before the run is opened
    run = read_run_spec(a.resume)
    # the file as the run's start read it: tokenizer "auto" made concrete and a BPE run's
    # default rate doubled (the file that started a run was refused as changing the tokenizer,
    # and halved a BPE run's rate); a run from --init kept its model's tokenizer and rate rule
    if run.init:
        mine = replace(s.spec, tokenizer=run.tokenizer if s.spec.tokenizer == "auto"
                       else s.spec.tokenizer)
    else:
        mine = s.spec.for_corpus(BPE_MIN_BYTES if run.tokenizer == "bpe" else 0)
    have = flat_settings(RunSettings(run))
    want = flat_settings(replace(s, spec=mine))
    out: dict[str, object] = {}
    for key in s.named:
        if key == "run.corpus" or key.startswith("early_stopping."):  # (those: below)
            continue
        new, old = want.get(key), have.get(key)
        if new != old:
            name = key.rsplit(".", 1)[-1] if key.count(".") == 1 else key
            out[name] = tuple(new) if isinstance(new, list) else new
    if (early := early_stopping_over(run.early_stopping, s)) != run.early_stopping:
        out["early_stopping"] = early
    return out


def cmd_train(a: argparse.Namespace) -> int:
    if a.export_adapter:  # an adapter folder that would be refused: say so before training
        from .export.source import check_dest, check_out

        folder = a.resume or a.out  # (one inside or around the run was refused after training)
        if folder:
            check_out(folder, a.export_adapter, force=a.force)
        else:
            check_dest(a.export_adapter, force=a.force)
    if a.rank_timeout is not None and not a.distributed:  # it was taken without a word
        raise ValueError("--rank-timeout applies to --distributed runs only; drop it, or launch "
                         "with mpirun ... --distributed")
    from .distributed import launched_as

    job = None
    rank, ranks = launched_as()
    if ranks > 1 and not a.distributed:  # (each trained on its own: the second was refused
        if rank:  # by the run's lock, and nothing said what was missing); rank 0 says it and
            return 0  # fails the job (a failing rank 1 could have it killed before it printed)
        raise ValueError(f"started as one of {ranks} MPI processes without --distributed, so "
                         "each would train on its own; add --distributed to train one run "
                         "together, or run it without mpirun")
    if a.distributed:
        from .distributed_run import DistributedJob

        job = DistributedJob(a.rank_timeout or RANK_TIMEOUT_S)
        if not job.leader:
            return job.follow()
    try:
        run = job.open(lambda: _open_for_training(a)) if job else _open_for_training(a)
        return _train(a, run, job)
    finally:
        if job is not None:
            job.finish()


def _check_adapter_export(targets: tuple[str, ...] | None) -> None:
    """``--export-adapter`` for a run whose LoRA adapts ``targets`` (None: no LoRA): refused
    before training when the export after it would be (it trained, saved, then failed)."""
    from .export.peft import peft_refused

    fix = "drop --export-adapter and use: python -m engine export --merged RUN OUT"
    if targets is None:
        raise ValueError(f"--export-adapter needs a LoRA run (--lora); {fix}")
    bad = peft_refused(targets)
    if bad:
        raise ValueError(f"--export-adapter: PEFT does not apply LoRA on {bad} un-merged; {fix}")


def _train(a: argparse.Namespace, run: Run, job: DistributedJob | None) -> int:
    from dataclasses import replace

    from .control import TrainControl
    from .run import UNSCORED, stop_on_signals
    from .samples import (
        SampleSchedule,
        append_sample,
        last_sampled_step,
        sample_record,
        sample_seed,
        sample_tag,
    )
    from .sampling import GENERATION_DEFAULTS
    from .tblog import run_logger

    with run:
        tr, lm = run.trainer, run.lm
        assert tr.trainable is not None
        if a.export_adapter:
            _check_adapter_export(tr.cfg.lora.targets if tr.cfg.lora is not None else None)
        state = sum(job.state_bytes) if job is not None and job.state_bytes else (
            tr.optimizer.state_bytes())  # (a distributed run's rank 0 said its own shard)
        print(f"model: {lm.n_params:,} parameters; {tr.trainable.describe()}; optimizer state "
              f"{state:,} bytes; {tr.token_counts[0]:,} train / "
              f"{tr.token_counts[1]:,} held-out tokens ({run.data.records})", file=sys.stderr)
        for warning in run.warnings:  # (a damaged snapshot passed over, as generate says it)
            print(f"warning: {warning}", file=sys.stderr)
        for note in run.notices:
            print(f"note: {note}", file=sys.stderr)
        if job is not None:
            print(job.describe(tr), file=sys.stderr)
        by_epochs = tr.steps_per_epoch * tr.cfg.epochs
        if (tr.cfg.lora is not None or tr.cfg.wsla) and run.spec.init is None:
            what = "LoRA adapters" if tr.cfg.lora is not None else "WSLA (x_proj only)"
            print(f"note: {what} on a new model with random weights: the base stays random; to "
                  "fine-tune a trained model pass --init RUN_OR_MODEL_FOLDER", file=sys.stderr)
        fix = {"epochs": "--epochs", "max_steps": "--max-steps"}[tr.limited_by]
        if (warmup_note := tr.warmup_notice(fix)) is not None:
            print(f"note: {warmup_note}", file=sys.stderr)
        capped = bool(tr.cfg.max_steps) and tr.total_steps < by_epochs  # by max steps alone
        if a.resume and a.epochs is not None and capped:  # (--epochs 20 "was refused" by it)
            print(f"note: the run's max steps {tr.cfg.max_steps} end it before its {tr.cfg.epochs} "
                  f"epochs (step {by_epochs}); pass --max-steps 0 to train them all, or a larger "
                  "--max-steps", file=sys.stderr)
        if tr.cursor.step >= tr.total_steps and not run.unscored:  # (unscored: scored below)
            more = ("--max-steps with a larger total (0: no limit)" if capped else
                    "--epochs with a larger total" if tr.cfg.max_steps != tr.total_steps else
                    "--epochs and --max-steps with larger totals (--max-steps 0: no limit)")
            print(f"{run.folder} is already at step {tr.cursor.step} of {tr.total_steps}; pass "
                  f"{more} to continue it", file=sys.stderr)
            return 0
        if run.measuring_first:
            print(f"{run.folder} {run.measuring_first}", file=sys.stderr)
        sampling = replace(GENERATION_DEFAULTS, max_new_tokens=a.sample_tokens, seed=tr.cfg.seed)

        schedule = SampleSchedule(a.sample_every, tr.cursor.step)  # (its last: the last shown)

        def show_sample(said: str, epoch_end: int | None = None) -> None:  # the run's prompts
            if a.sample_tokens <= 0:  # (run.json): the same after resume
                return
            step, epochs = tr.cursor.step, tr.cursor.epoch
            tag = sample_tag(step, epoch_end)  # (recorded as the window records it)
            schedule.shown(step)
            keep = last_sampled_step(run.folder) != step  # (a resume's first: recorded)
            for i, prompt in enumerate(run.spec.prompts):
                s = replace(sampling, seed=sample_seed(sampling.seed, i))
                text = "".join(lm.generate(prompt, s))
                print(f"\n--- sample {said} ---\n{terminal_safe(prompt + text)}\n", file=sys.stderr)
                if keep:  # the Gallery's too (a CLI run opened in the window showed none)
                    append_sample(run.folder, sample_record(tag, step, epochs, prompt,
                                                            prompt + text, s, "cpu"))

        def on_epoch(rep: EpochReport) -> None:
            sys.stderr.write("\n")
            val = (f" | held-out loss {rep.val.loss:.4f} ppl {rep.val.perplexity:.2f} "
                   f"bpb {rep.val.bits_per_byte:.3f} acc {rep.val.accuracy:.3f} on "
                   f"{rep.val.describe()}") if rep.val else ""
            print(f"epoch {rep.epoch + 1}: train loss {rep.train_loss:.4f}, grad norm "
                  f"{rep.grad_norm:.3f}{val}", file=sys.stderr)
            show_sample(f"after epoch {rep.epoch + 1}", rep.epoch + 1)

        show_sample(f"at step {tr.cursor.step}, resuming" if tr.cursor.step else "before training")
        tr.on_evaluate = lambda: _evaluating(tr.cursor.step)
        t0, first = time.perf_counter(), tr.cursor.step
        control = TrainControl()
        tb = run_logger(run, resumed=bool(a.resume), wanted=a.tensorboard,
                        on_error=lambda m: print(f"\nwarning: {m}", file=sys.stderr))

        def on_step(r: StepReport) -> None:
            _progress(r)
            if tb is not None:
                tb.on_step(r)
            if schedule.due(r.step, tr.at_epoch_end):
                show_sample(f"at step {r.step}")

        def on_epoch_end(rep: EpochReport) -> None:
            on_epoch(rep)
            if tb is not None:
                tb.on_epoch(run.step, rep)

        try:
            with stop_on_signals(control, lasting=True, stepped=lambda: bool(tr.history)):
                result = run.train(on_step=on_step, on_epoch=on_epoch_end,
                                   control=job.control(control) if job else control,
                                   before_save=tb.flush if tb is not None else None,
                                   on_notice=lambda m: print(f"\nwarning: {m}", file=sys.stderr))
        finally:
            if tb is not None:
                tb.close()
        if (result.state == "finished" or result.reason) and schedule.last != result.step:
            show_sample(f"at step {result.step}, the end of the run")  # (a run shorter than an
            # epoch showed only the untrained model's sample)
        how = "stopped" if result.state == "stopped" else "finished"
        if result.reason:  # (early stopping: the run keeps its best snapshot too)
            how += f" ({result.reason}; the best snapshot is kept: {run.folder / 'best.json'})"
        if result.unscored:  # (it said "finished")
            how += f" ({UNSCORED}; `train --resume {run.folder}` scores it)"
        took = time.perf_counter() - t0
        val = (f" (held-out loss {result.val_loss:.4f})" if result.val_loss is not None
               else "")  # a run ending inside an epoch printed its last one nowhere
        session = plural(result.step - first, "step")
        print(f"\n{how}: saved {result.snapshot} at step {result.step} ({session} in {took:.1f} s)"
              f"{val}", file=sys.stderr)  # (a resume said "after 480 steps in 0.2 s")
        if job is not None:
            print(f"distributed: {100 * job.comm_fraction(took):.1f}% of the time in communication "
                  "(all-reduce, all-gather, waiting for other ranks)", file=sys.stderr)
        if a.export_adapter:
            from .export import export_peft

            # the snapshot this process just saved (given the run folder, the export said the
            # run "is training: the steps after it are not in the export", of its own lock)
            again = (f"the run is saved ({result.snapshot}): export its adapter with `python -m "
                     f"engine export --peft {shlex.quote(str(run.folder))} OUT`")
            try:
                notes = export_peft(result.snapshot, a.export_adapter, force=a.force)
            except (MambaStudioError, OSError) as exc:  # (read as lost training: no word of
                raise MambaStudioError(f"{one_line(exc)}; {again}") from None  # the run)
            except KeyboardInterrupt:
                print(f"\n{again}", file=sys.stderr)
                raise
            for w in notes:
                print(f"warning: {w}", file=sys.stderr)
            print(f"PEFT adapter: {a.export_adapter} (its unmerged base: "
                  f"{Path(a.export_adapter) / 'base'})", file=sys.stderr)
    return 0
