"""Sentiment140 pipeline: users as clients, hours, label skew, tokens, GloVe, the LSTM task.

The real data cannot be fetched in CI, so a small synthetic set in the authors' format is read
twice: as the original CSV written to ``tmp_path`` and through ``tfds.data_source`` under
``tfds.testing.mock_data`` (whose own random examples have no users with many tweets, no valid
dates and polarities outside {0, 4}).
"""

from __future__ import annotations

import collections
import csv
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_avail as fa

# name -> (tweets, allowed hours); users with > 40 tweets are clients.
USERS = {
    "alice": (47, range(24)),
    "bob": (41, range(24)),
    "carol": (40, range(24)),
    "dave": (60, [0, *range(9, 24)]),  # never tweets in hours 1..8
    "eve": (3, range(24)),
}
WORDS = ["day", "game", "food", "movie", "rain", "work"]


def synthetic_rows(seed: int = 0) -> list[dict]:
    """Tweets in the CSV's columns; each text carries a unique token ``idK`` and 4-8 tokens."""
    rng = np.random.default_rng(seed)
    rows = []
    for user, (n, hours) in USERS.items():
        for _ in range(n):
            k, positive = len(rows), bool(rng.integers(2))
            hour = int(rng.choice(list(hours)))
            word = WORDS[rng.integers(len(WORDS))]
            text = (f"@pal I LOVE this {word}!! id{k}" if positive
                    else f"I hate the {word} &amp; more http://t.co/x id{k}")
            rows.append({"polarity": 4 if positive else 0, "id": str(1000 + k),
                         "date": f"Mon Apr 06 {hour:02d}:{k % 60:02d}:07 PDT 2009",
                         "query": "NO_QUERY", "user": user, "text": text})
    return rows


@pytest.fixture(scope="module")
def rows():
    return synthetic_rows()


@pytest.fixture()
def csv_path(tmp_path, rows):
    path = tmp_path / fa.data.SENTIMENT140_CSV
    with open(path, "w", newline="", encoding="ISO-8859-1") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        for r in rows:
            writer.writerow([r["polarity"], r["id"], r["date"], r["query"], r["user"], r["text"]])
    return path


def load_tfds_mock(rows, **kwargs):
    tfds = pytest.importorskip("tensorflow_datasets")
    examples = [{"polarity": np.array(r["polarity"], np.int32),
                 **{k: r[k].encode() for k in ("date", "query", "user", "text")}} for r in rows]
    with tfds.testing.mock_data(as_data_source_fn=lambda *a, **k: examples):
        return fa.data.load_sentiment140(download=False, **kwargs)


def test_users_with_more_than_40_tweets_are_the_clients_and_a_tenth_is_test(csv_path):
    data = fa.data.load_sentiment140(csv_path, vocab_size=1000)
    assert data.users == ("alice", "bob", "dave")  # carol has 40, eve 3
    test_counts = np.bincount(data.test["client"], minlength=3)
    # Per client: round(n / 10) test tweets (47 -> 5, 41 -> 4, 60 -> 6), the rest train.
    assert test_counts.tolist() == [5, 4, 6]
    assert data.train.counts.tolist() == [42, 37, 54]
    assert data.train.arrays["x"].dtype == np.int32 and data.train.arrays["x"].shape == (133, 25)
    assert {k: v.dtype for k, v in data.test.items()} == {k: np.dtype(np.int32) for k in
                                                          ("x", "y", "hour", "client")}


def test_train_and_test_partition_each_users_tweets(csv_path, rows):
    data = fa.data.load_sentiment140(csv_path, vocab_size=1000, max_len=12)

    def ident(x):  # the unique idK token of each tweet
        return {data.vocab[t] for t in x if data.vocab[t].startswith("id")}.pop()

    for i, user in enumerate(data.users):
        mine = {f"id{k}": r for k, r in enumerate(rows) if r["user"] == user}
        client = data.train.client(i)
        train_ids = [ident(x) for x in client["x"]]
        assert len(set(train_ids)) == len(train_ids) and set(train_ids) <= set(mine)
        for k, y, h in zip(train_ids, client["y"], client["hour"], strict=True):
            assert y == (mine[k]["polarity"] == 4) and h == int(mine[k]["date"][11:13])
        # The vocabulary comes from training tweets only: a test tweet's idK token is OOV, and
        # the test tweets are exactly the user's other tweets.
        held = data.test["client"] == i
        assert np.all(np.sum(data.test["x"][held] == fa.data.OOV, axis=1) == 1)
        rest = [(int(r["polarity"] == 4), int(r["date"][11:13]))
                for k, r in mine.items() if k not in train_ids]
        assert sorted(rest) == sorted(zip(data.test["y"][held].tolist(),
                                          data.test["hour"][held].tolist(), strict=True))


def test_csv_and_tfds_sources_give_the_same_data(csv_path, rows):
    a = fa.data.load_sentiment140(csv_path, alpha=0.25, num_clients=2, seed=3)
    b = load_tfds_mock(rows, alpha=0.25, num_clients=2, seed=3)
    assert a.users == b.users and a.vocab == b.vocab and len(a.users) == 2
    for key in ("x", "y", "hour"):
        np.testing.assert_array_equal(a.train.arrays[key], b.train.arrays[key])
        np.testing.assert_array_equal(a.test[key], b.test[key])


def test_tokens_are_lowercase_words_truncated_and_padded():
    assert fa.data.tokenize("@Bob I don't LOVE http://x.co/a &amp; it!!") == [
        "<user>", "i", "don't", "love", "<url>", "it"]
    tokens = [["b", "a", "b", "c"], ["a", "b"], ["d"]]
    vocab = fa.data.build_vocab(tokens, 4)
    assert vocab == ("<pad>", "<oov>", "b", "a")  # by count, then alphabetically (a, c, d: 2, 1, 1)
    x = fa.data.encode(tokens + [[]], vocab, 3)
    assert x.dtype == np.int32
    assert x.tolist() == [[2, 3, 2], [3, 2, 0], [1, 0, 0], [0, 0, 0]]


def test_loader_tokens_are_the_first_max_len_words(csv_path, rows):
    kept = [r for r in rows if r["user"] in ("alice", "bob", "dave")]
    for max_len in (5, 12):  # every tweet has 6 or 7 tokens: truncated, then padded
        data = fa.data.load_sentiment140(csv_path, vocab_size=1000, max_len=max_len)
        x = data.train.arrays["x"]
        lengths = np.sum(x != fa.data.PAD, axis=1)
        assert np.all(x[np.arange(max_len)[None, :] >= lengths[:, None]] == fa.data.PAD)
        decoded = collections.Counter(tuple(data.vocab[t] for t in row if t) for row in x)
        expected = collections.Counter(tuple(fa.data.tokenize(r["text"])[:max_len])
                                       for r in kept)
        assert not decoded - expected and decoded.total() == data.train.num_examples
    assert set(lengths.tolist()) == {6, 7}
    # A small vocabulary keeps the 14 words every tweet template uses, then the first 4 idK
    # tokens (count 1, alphabetical); the other tweets' idK tokens become OOV (1).
    small = fa.data.load_sentiment140(csv_path, vocab_size=20, max_len=12)
    ids = [w for w in small.vocab if w.startswith("id")]
    assert len(small.vocab) == 20 and small.vocab[-4:] == tuple(ids) == tuple(sorted(ids))
    no_oov = np.all(small.train.arrays["x"] != fa.data.OOV, axis=1)
    assert no_oov.sum() == 4 and small.train.arrays["x"].max() == 19


def test_hours_are_parsed_from_the_date_strings():
    dates = ["Mon Apr 06 22:19:45 PDT 2009", b"Tue Jun 16 00:00:01 PDT 2009", "Sat May 9 7:05:00"]
    assert fa.data.parse_hours(dates).tolist() == [22, 0, 7]
    with pytest.raises(ValueError, match="Mon Apr 06 PDT"):
        fa.data.parse_hours(["Mon Apr 06 PDT 2009"])
    with pytest.raises(ValueError, match="25:00:00"):
        fa.data.parse_hours(["Mon Apr 06 25:00:00 PDT 2009"])


def test_sleep_window_is_the_quietest_8_consecutive_hours(csv_path):
    data = fa.data.load_sentiment140(csv_path)
    assert fa.data.sleep_start_hours(data.train)[data.users.index("dave")] == 1

    def clients(*hour_lists):
        return fa.FederatedData.from_client_arrays(
            [{"hour": np.asarray(h, np.int32)} for h in hour_lists])

    fd = clients(list(range(6, 22)),  # quiet 22..5: the window wraps past midnight
                 [0, 9, 10, 11, 12, 21, 22, 23],  # quiet 1..8 and 13..20: the earliest wins
                 list(range(24)) * 2 + [3])  # one extra at 3: quiet from 4
    assert fa.data.sleep_start_hours(fd).tolist() == [22, 1, 4]
    assert fa.data.sleep_start_hours(fd, window=24).tolist() == [0, 0, 0]
    assert fa.data.hourly_counts(fd)[2].tolist() == [2, 2, 2, 3] + [2] * 20
    with pytest.raises(ValueError, match="window"):
        fa.data.sleep_start_hours(fd, window=25)


def unbalanced_hours():
    hours, labels = [], []
    for h in range(24):
        hours += [h] * (87 + h)
        labels += [1] * (37 + h) + [0] * 50  # 37+h positives, 50 negatives
    return np.asarray(hours), np.asarray(labels)


def test_positive_share_is_the_triangle_of_the_paper():
    assert np.allclose(fa.data.positive_share(np.array([0, 3, 6, 12, 18, 23]), 0.0),
                       [0, 0.25, 0.5, 1, 0.5, 1 / 12])
    assert np.allclose(fa.data.positive_share(np.array([0, 12]), 0.25), [0.25, 0.75])


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5])
def test_label_skew_hits_each_hours_share_with_fewest_drops(alpha):
    hours, labels = unbalanced_hours()
    keep = fa.data.skew_by_hour(hours, labels, alpha, seed=1)
    for h in range(24):
        p = alpha + (1 - 2 * alpha) * h / 12 if h <= 12 else (1 - alpha) - (1 - 2 * alpha) * (
            h - 12) / 12
        pos, neg = 37 + h, 50
        kept_pos = int(np.sum(keep & (hours == h) & (labels == 1)))
        kept_neg = int(np.sum(keep & (hours == h) & (labels == 0)))
        assert abs(kept_pos - p * (kept_pos + kept_neg)) <= 0.5  # the share, up to rounding
        assert kept_pos == pos or kept_neg == neg  # only one class loses tweets
        # ... and no more than needed: putting one dropped tweet back overshoots the target.
        if kept_pos < pos:
            assert (kept_pos + 1) / (kept_pos + 1 + kept_neg) - p > p - kept_pos / (
                kept_pos + kept_neg) - 1e-12
    if alpha == 0.0:
        assert not np.any(keep & (hours == 0) & (labels == 1))
        assert not np.any(keep & (hours == 12) & (labels == 0))
    assert np.array_equal(keep, fa.data.skew_by_hour(hours, labels, alpha, seed=1))


def test_label_skew_at_one_half_drops_nothing_from_balanced_hours():
    hours = np.repeat(np.arange(24), 10)
    labels = np.tile([0, 1], 120)
    assert fa.data.skew_by_hour(hours, labels, 0.5).all()
    with pytest.raises(ValueError, match="alpha"):
        fa.data.skew_by_hour(hours, labels, 0.6)
    with pytest.raises(ValueError, match="labels"):
        fa.data.skew_by_hour(hours, labels * 4, 0.5)


def test_loader_skews_the_kept_users_tweets(csv_path, rows):
    data = fa.data.load_sentiment140(csv_path, alpha=0.0)
    hours = np.concatenate([data.train.arrays["hour"], data.test["hour"]])
    labels = np.concatenate([data.train.arrays["y"], data.test["y"]])
    assert not np.any((hours == 0) & (labels == 1)) and not np.any((hours == 12) & (labels == 0))
    for h in range(24):
        n = np.sum(hours == h)
        p = fa.data.positive_share(h, 0.0)
        assert abs(np.sum((hours == h) & (labels == 1)) - p * n) <= 0.5
    assert len(hours) < 148  # alice + bob + dave before the skew


def test_bad_arguments_and_missing_files_give_clear_errors(csv_path, tmp_path, rows):
    for kwargs, name in [({"alpha": 0.7}, "alpha"), ({"test_fraction": 1.0}, "test_fraction"),
                         ({"num_clients": 4}, "num_clients must be <= 3"),
                         ({"min_tweets": 100}, "min_tweets"), ({"vocab_size": 2}, "vocab_size"),
                         ({"max_len": 0}, "max_len"),
                         # fractional sizes: refused, not truncated by int()
                         ({"min_tweets": 1.9}, r"min_tweets must be an integer >= 1, got 1\.9"),
                         ({"num_clients": 2.7}, "num_clients must be None or an integer"),
                         ({"max_len": 3.9}, "max_len must be an integer"),
                         ({"vocab_size": 5.5}, r"vocab_size \(pad, OOV and one word\) must")]:
        with pytest.raises(ValueError, match=name):
            fa.data.load_sentiment140(csv_path, **kwargs)
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match="trainingandtestdata.zip") as info:
        fa.data.load_sentiment140(missing)
    assert str(missing) in str(info.value)
    bad = tmp_path / "bad.csv"
    bad.write_text('"2","1","Mon Apr 06 22:19:45 PDT 2009","q","u","meh"\n')
    with pytest.raises(ValueError, match="polarity"):
        fa.data.load_sentiment140(bad, min_tweets=1)
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=5), pytest.raises(ValueError, match="polarity"):
        fa.data.load_sentiment140(download=False, min_tweets=1)  # random mock polarities


def test_glove_reader_fills_known_words_and_seeds_the_rest(tmp_path):
    path = tmp_path / "glove.twitter.27B.4d.txt"
    path.write_text("love 1 2 3 4\nhate -1 -2 -3 -4.5\nodd word 1 2 3 4\n<user> 0.5 0 0 0\n")
    vocab = ("<pad>", "<oov>", "love", "zzz", "hate", "<user>")
    with pytest.warns(UserWarning, match="skipped 1"):
        emb = fa.data.load_glove(path, vocab, dim=4, seed=0)
    assert emb.shape == (6, 4) and emb.dtype == np.float32
    np.testing.assert_array_equal(emb[[0, 2, 4, 5]], [[0, 0, 0, 0], [1, 2, 3, 4],
                                                      [-1, -2, -3, -4.5], [0.5, 0, 0, 0]])
    assert 0 < np.abs(emb[[1, 3]]).max() < 1  # OOV and unknown words: small random rows
    with zipfile.ZipFile(tmp_path / "glove.twitter.27B.zip", "w") as z:
        z.write(path, "glove.twitter.27B.4d.txt")
    with pytest.warns(UserWarning):
        np.testing.assert_array_equal(
            fa.data.load_glove(tmp_path / "glove.twitter.27B.zip", vocab, dim=4), emb)
    with pytest.raises(ValueError, match="dim=25"):
        fa.data.load_glove(path, vocab)
    with pytest.raises(FileNotFoundError, match="glove.twitter.27B.zip") as info:
        fa.data.load_glove(tmp_path / "absent.txt", vocab)
    assert str(tmp_path / "absent.txt") in str(info.value)


def test_lstm_shapes_and_parameter_counts():
    emb = np.random.default_rng(0).normal(size=(50, 25)).astype(np.float32)
    frozen = fa.tasks.lstm_classifier(50, embeddings=emb)
    params = jax.jit(frozen.init)(jax.random.PRNGKey(0))
    count = sum(p.size for p in jax.tree.leaves(params))
    # 4H(D+H+1) + 4H(2H+1) + 2(H+1) with D=25, H=16: the embedding is not a parameter.
    assert count == 4 * 16 * 42 + 4 * 16 * 33 + 2 * 17 == 4834
    batch = {"x": jnp.array([[3, 4, 0, 0], [5, 0, 0, 0], [0, 0, 0, 0]], jnp.int32),
             "y": jnp.array([0, 1, 1]), "hour": jnp.array([1, 2, 3])}
    assert jnp.shape(jax.jit(frozen.loss)(params, batch)) == ()
    assert set(jax.jit(frozen.metrics)(params, batch)) == {"accuracy"}
    with pytest.warns(UserWarning, match="random trainable embeddings"):
        trainable = fa.tasks.lstm_classifier(50)
    shapes = jax.eval_shape(trainable.init, jax.random.PRNGKey(0))
    assert sum(p.size for p in jax.tree.leaves(shapes)) == 4834 + 50 * 25
    tuned = fa.tasks.lstm_classifier(50, embeddings=emb, train_embeddings=True)
    tuned_params = jax.jit(tuned.init)(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(tuned_params["Embed_0"]["embedding"], emb)
    with pytest.raises(ValueError, match="embeddings must have shape"):
        fa.tasks.lstm_classifier(49, embeddings=emb)


def test_lstm_ignores_padding():
    emb = np.random.default_rng(1).normal(size=(10, 25)).astype(np.float32)
    task = fa.tasks.lstm_classifier(10, embeddings=emb)
    params = jax.jit(task.init)(jax.random.PRNGKey(2))
    module = fa.tasks.LSTMClassifier()
    apply = jax.jit(lambda inputs, lengths: module.apply({"params": params}, inputs, lengths))
    short = jnp.array([[3, 4, 5]], jnp.int32)
    long = jnp.array([[3, 4, 5, 0, 0, 0, 0]], jnp.int32)
    a = apply(jnp.asarray(emb)[short], jnp.array([3]))
    b = apply(jnp.asarray(emb)[long], jnp.array([3]))
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    c = apply(jnp.asarray(emb)[long], jnp.array([7]))
    assert not np.allclose(a, c)  # lengths matter: reading the padding changes the state
    loss_short = jax.jit(task.loss)(params, {"x": short, "y": jnp.array([1])})
    loss_long = jax.jit(task.loss)(params, {"x": long, "y": jnp.array([1])})
    np.testing.assert_allclose(loss_short, loss_long, rtol=1e-6)


def test_lstm_learns_a_separable_toy_problem():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 64)
    x = rng.integers(4, 20, (64, 6)).astype(np.int32)
    x[:, 2] = np.where(y == 1, 2, 3)  # token 2 marks positives, 3 negatives
    x[:, 5] = 0
    emb = rng.normal(size=(20, 25)).astype(np.float32)
    task = fa.tasks.lstm_classifier(20, embeddings=emb)
    params = jax.jit(task.init)(jax.random.PRNGKey(0))
    batch = {"x": jnp.asarray(x), "y": jnp.asarray(y, jnp.int32)}
    step = jax.jit(lambda p: jax.tree.map(lambda w, g: w - 0.5 * g, p,
                                          jax.grad(task.loss)(p, batch)))
    loss, metrics = jax.jit(task.loss), jax.jit(task.metrics)
    first = float(loss(params, batch))
    for _ in range(60):
        params = step(params)
    assert float(loss(params, batch)) < 0.5 * first
    assert float(metrics(params, batch)["accuracy"]) > 0.9


def test_fedlaavg_runs_on_the_mock_tfds_clients(rows):
    data = load_tfds_mock(rows, alpha=0.0, max_len=10, vocab_size=40)
    start = fa.data.sleep_start_hours(data.train)
    hours = np.arange(24)[:, None]
    table = (hours - start[None, :]) % 24 < 8  # [24, N] available while asleep
    task = fa.tasks.lstm_classifier(len(data.vocab), embeddings=np.random.default_rng(0).normal(
        size=(len(data.vocab), 25)).astype(np.float32))
    algorithm = fa.algorithms.FedLaAvg(clients_per_round=2, local_steps=2, batch_size=2,
                                       client_lr=0.1)
    result = fa.simulate(task, data.train, algorithm, fa.availability.Trace(table), rounds=3,
                         eval_every=1, test_data=data.test)
    assert np.isfinite(result.history["train_loss"]).all()
    assert np.isfinite(result.history["test_accuracy"]).all()
    assert sum(p.size for p in jax.tree.leaves(result.params)) == 4834
