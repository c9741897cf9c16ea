"""Learning benchmarks: can the default model and schedule learn what Mamba is known for?

    python -m benchmarks.learning copy|induction|text [--minutes 10] [--out DIR]
    python -m benchmarks.learning.plot DIR/*.jsonl --out docs/learning.png

``tasks`` generates the data, ``ngram`` computes the n-gram baselines, ``score`` the answer
accuracy, ``run`` trains through the engine's public API and writes JSON lines.
"""
