"""Item embeddings for DMBGN's item nodes (DMBGN §3.4.2): MetaPath2Vec pre-training on the training sessions'
co-occurrence graph, user-supplied tables, and their wiring into VoucherModel, save / load and the CLI."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.voucher.world import PROFILE_CATEGORICAL, make_world
from promokit.training import TrainConfig, read_weights
from promokit.voucher.contract import check_tables
from promokit.voucher.estimator import VoucherModel
from promokit.voucher.graph import UVGStore
from promokit.voucher.item_embedding import co_occurrence_graph, pretrain_item_embeddings, read_item_embeddings

#: A few seconds' worth of MetaPath2Vec on the small worlds below.
FAST = {"dim": 8, "walk_length": 8, "context_size": 3, "walks_per_node": 2, "epochs": 2, "progress": False}
TINY_GRAPH = {"emb_dim": 4, "hidden": [16], "dropout": 0.0, "uvg_dim": 8, "attention_units": 8, "gnn_layers": 1}
TINY_TRAIN = TrainConfig(epochs=2, batch_size=256, lr=0.003, patience=1, progress=False, monitor="loss",
                         embedding_decay=0.0, decay_rows=0)


@pytest.fixture(scope="module")
def world():
    return make_world(n_users=200, n_vouchers=20, n_items=200, n_sessions=1500, seed=2)


@pytest.fixture(scope="module")
def store(world, split):
    return UVGStore.build(world.tables, fit_rows=split.train)


def _code(store, item_ids):
    return store.encoders["item"].transform(pd.Series(np.asarray(item_ids), name="item_id"))


# ------------------------------------------------------------------------------------------------ pre-training
def test_rows_are_the_store_item_codes_and_oov_row_is_zero(world, split, store):
    table = pretrain_item_embeddings(world.tables, split.train, store, **FAST)
    assert table.shape == (store.cardinality("item"), 8) and table.dtype == torch.float32
    assert torch.equal(table[0], torch.zeros(8))
    edges, sizes = co_occurrence_graph(world.tables, split.train, store)
    linked = torch.unique(edges[("user", "acts_on", "item")][1])
    assert (table[linked].norm(dim=1) > 0).all()
    unlinked = torch.ones(len(table), dtype=torch.bool)
    unlinked[linked] = False
    assert (table[unlinked] == 0).all()
    # the graph: one edge per distinct (user, item) of the training sessions' atc / ord events, item = store code
    events = world.tables.events
    train_events = events[events["session"].isin(split.train) & events["action"].isin(["atc", "ord"])]
    users = world.tables.sessions["user_id"].to_numpy()[train_events["session"]]
    expected = {(u, c) for u, c in zip(users, _code(store, train_events["item_id"])) if c > 0}
    user_ids = pd.unique(users)  # users are numbered in order of appearance
    got = {(user_ids[u], c) for u, c in edges[("user", "acts_on", "item")].t().tolist()}
    assert got == expected and sizes["item"] == store.cardinality("item")
    assert torch.equal(edges[("item", "acted_on_by", "user")], edges[("user", "acts_on", "item")].flip(0))


def test_same_seed_gives_a_bit_identical_table_and_leaves_torch_random_state(world, split, store):
    state = torch.get_rng_state()
    first = pretrain_item_embeddings(world.tables, split.train, store, **FAST, seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, pretrain_item_embeddings(world.tables, split.train, store, **FAST, seed=3))
    assert not torch.equal(first, pretrain_item_embeddings(world.tables, split.train, store, **FAST, seed=4))


def test_events_of_non_training_sessions_do_not_change_the_embeddings(world, split, store):
    """Rewrite every validation and test session's events (other items, half of them dropped): the vocabulary
    and the embeddings stay bit-identical. Rewriting training sessions' events does change them."""
    rng = np.random.default_rng(0)
    clean = pretrain_item_embeddings(world.tables, split.train, store, **FAST)

    def rewritten(rows):
        events = world.tables.events.copy()
        hit = events["session"].isin(rows).to_numpy()
        events.loc[hit, "item_id"] = rng.permutation(events.loc[hit, "item_id"].to_numpy())
        events = events[~hit | (rng.random(len(events)) < 0.5)].reset_index(drop=True)
        return replace(world.tables, events=events)

    future = rewritten(np.concatenate([split.valid, split.test]))
    future_store = UVGStore.build(future, fit_rows=split.train)
    assert future_store.vocabulary() == store.vocabulary()
    assert torch.equal(pretrain_item_embeddings(future, split.train, future_store, **FAST), clean)
    past = rewritten(split.train)
    assert not torch.equal(pretrain_item_embeddings(past, split.train, store, **FAST), clean)


def test_ctrl_c_stops_and_keeps_what_was_learned(world, split, store, monkeypatch):
    from promokit.voucher import item_embedding

    one_epoch = pretrain_item_embeddings(world.tables, split.train, store, **{**FAST, "epochs": 1})
    real, calls = item_embedding._train_epoch, []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(item_embedding, "_train_epoch", interrupted)
    with pytest.warns(UserWarning, match="interrupted in epoch 2 of 3: keeping the embeddings learned so far"):
        kept = pretrain_item_embeddings(world.tables, split.train, store, **{**FAST, "epochs": 3})
    assert torch.equal(kept, one_epoch)


def _two_cluster_world(edges: str = "events"):
    """Users 0–29 act only on items 0–9, users 30–59 only on items 10–19 (``edges="events"``), or vouchers v0–v5
    cover items 0–9 and v6–v11 items 10–19 and there is no behaviour log (``"voucher_items"``), or both
    (``"both"``: the walks alternate item → user → item → voucher → item). Item features carry nothing."""
    rng = np.random.default_rng(0)
    n = 240
    user = np.arange(n) % 60
    cluster = user // 30
    voucher = np.where(cluster == 0, rng.integers(0, 6, n), rng.integers(6, 12, n))
    sessions = pd.DataFrame({"session_id": np.arange(n), "user_id": user, "voucher_id": [f"v{v}" for v in voucher],
                             "min_spend": 10.0, "discount": 2.0, "collect_time": 1000.0 * np.arange(n) + 500.0,
                             "outcome_time": 1000.0 * np.arange(n) + 900.0, "redeemed": rng.integers(0, 2, n)})
    items = pd.DataFrame({"item_id": np.arange(20), "category": "c", "brand": 0, "price_level": 0})
    pairs = pd.DataFrame({"voucher_id": [f"v{v}" for v in range(12) for _ in range(5)],
                          "item_id": [10 * (v // 6) + i for v in range(12) for i in rng.choice(10, 5, replace=False)]})
    owner = np.repeat(np.arange(n), 4)
    events = pd.DataFrame({"session_id": owner, "item_id": 10 * cluster[owner] + rng.integers(0, 10, len(owner)),
                           "action": rng.choice(["atc", "ord"], len(owner)),
                           "action_time": sessions["collect_time"].to_numpy()[owner] - rng.uniform(1, 400, len(owner))})
    return check_tables(sessions, None if edges == "voucher_items" else events, items,
                        voucher_items=None if edges == "events" else pairs)


@pytest.mark.parametrize("edges", ["events", "voucher_items", "both"])
def test_items_that_co_occur_end_closer_than_items_that_never_do(edges):
    tables = _two_cluster_world(edges)
    train = np.arange(200)
    store = UVGStore.build(tables, fit_rows=train)
    graph, _ = co_occurrence_graph(tables, train, store)
    assert (("user", "acts_on", "item") in graph) == (edges != "voucher_items")
    assert (("voucher", "covers", "item") in graph) == (edges != "events")
    table = pretrain_item_embeddings(tables, train, store, dim=8, epochs=10, progress=False)
    codes = _code(store, np.arange(20))
    assert (codes > 0).all()
    unit = torch.nn.functional.normalize(table[torch.from_numpy(codes)], dim=1)
    cosine = (unit @ unit.T).numpy()
    cluster = np.arange(20) // 10
    same = (cluster[:, None] == cluster[None, :]) & ~np.eye(20, dtype=bool)
    across = cluster[:, None] != cluster[None, :]
    assert cosine[same].mean() > cosine[across].mean() + 0.3
    np.fill_diagonal(cosine, -2)
    assert (cluster[cosine.argmax(axis=1)] == cluster).all()  # every item's nearest item is in its cluster


def test_pretraining_errors(world, split, store):
    with pytest.raises(DataError, match=r"context_size must be between 2 and walk_length \+ 1 = 9, got 10"):
        pretrain_item_embeddings(world.tables, split.train, store, walk_length=8, context_size=10)
    with pytest.raises(DataError, match="dim must be a positive integer"):
        pretrain_item_embeddings(world.tables, split.train, store, dim=0)
    with pytest.raises(DataError, match="outside the"):
        pretrain_item_embeddings(world.tables, [0, 10**6], store, **FAST)
    no_behaviour = replace(world.tables, events=world.tables.events.iloc[:0], voucher_items=None)
    with pytest.raises(DataError, match="no co-occurrence to learn from"):
        pretrain_item_embeddings(no_behaviour, split.train, store, **FAST)


# ------------------------------------------------------------------------------------------------ user table
def _user_table(store, k=3, drop=5, extra=("unknown-item",)):
    """Embeddings value = item_id · (1, 2, …, k) for the store's items but the first ``drop``, plus items the
    store never saw, in shuffled row order."""
    ids = list(store.encoders["item"].vocabulary[drop:])
    frame = pd.DataFrame({"item_id": ids}).sample(frac=1.0, random_state=0)
    for j in range(k):
        frame[f"e{j}"] = frame["item_id"].astype(float) * (j + 1)
    return pd.concat([frame, pd.DataFrame({"item_id": [10**6 + i for i in range(len(extra))],
                                           **{f"e{j}": 1.0 for j in range(k)}})], ignore_index=True)


@pytest.mark.parametrize("kind", ["frame", "csv", "parquet"])
def test_user_table_is_aligned_to_the_store_codes(store, tmp_path, kind):
    frame = _user_table(store)
    source = frame
    if kind != "frame":
        source = tmp_path / f"items.{kind}"
        frame.to_csv(source, index=False) if kind == "csv" else frame.to_parquet(source, index=False)
    with pytest.warns(UserWarning, match=r"5 of the model's \d+ training items have no row and get a zero"):
        table = read_item_embeddings(source, store)
    assert table.shape == (store.cardinality("item"), 3) and table.dtype == torch.float32
    vocabulary = store.encoders["item"].vocabulary
    codes = _code(store, vocabulary)
    expected = torch.tensor(np.asarray(vocabulary, dtype=np.float32)[:, None] * [1.0, 2.0, 3.0])
    expected[:5] = 0.0  # the dropped items
    assert torch.equal(table[torch.from_numpy(codes)], expected.float())
    assert torch.equal(table[0], torch.zeros(3))


def _set(frame, column, row, value):
    frame = frame.astype({column: object}) if isinstance(value, str) else frame.copy()
    frame.loc[row, column] = value
    return frame


@pytest.mark.parametrize("mutate, message", [
    (lambda f: f.rename(columns={"item_id": "item"}), r"column 'item_id' \(the item id\) is missing .*did you mean 'item'"),
    (lambda f: f[["item_id"]], "no numeric embedding columns beside 'item_id'"),
    (lambda f: _set(f, "e1", 2, "x"), r"column 'e1' is not numeric: 1 of \d+ values are not numbers, e.g. row 2"),
    (lambda f: _set(f, "e2", 4, np.nan), r"column 'e2' has 1 NaN or infinite values in \d+ rows .*e.g. row 4"),
    (lambda f: _set(_set(f, "e0", 1, np.inf), "e0", 3, -np.inf), r"column 'e0' has 2 NaN or infinite values"),
    (lambda f: pd.concat([f, f.iloc[[7, 8]]]), r"2 duplicate item_id values in \d+ rows"),
    (lambda f: f.assign(item_id=f["item_id"] + 10**7), r"none of its \d+ item_ids is among the model's \d+ training"),
    (lambda f: _set(f, "item_id", 0, np.nan), r"column 'item_id' has 1 missing values"),
])
def test_user_table_errors_are_one_line(store, mutate, message):
    with pytest.raises(DataError, match=message) as error:
        read_item_embeddings(mutate(_user_table(store)), store)
    assert "\n" not in str(error.value)


# ------------------------------------------------------------------------------------------------ estimator
@pytest.mark.parametrize("source", ["metapath2vec", "table"])
def test_dmbgn_with_item_embeddings_saves_and_loads_without_them(world, split, store, tmp_path, source):
    """The model directory rebuilds the item table from its saved width and weights: the user table may be gone
    and nothing is pre-trained again at load."""
    path = tmp_path / "items.csv"
    _user_table(store, k=5, drop=0).to_csv(path, index=False)
    params = ({**TINY_GRAPH, "item_embeddings": "metapath2vec", "item_pretrain": {**FAST, "dim": 6}}
              if source == "metapath2vec" else {**TINY_GRAPH, "item_embeddings": str(path)})
    width = 6 if source == "metapath2vec" else 5
    model = VoucherModel("dmbgn-avgpooling", params, TINY_TRAIN).fit(world.tables,
                                                                     rows=split.train, validation=split.valid)
    before = model.predict(world.tables, rows=split.test)
    model.save(tmp_path / "model")
    path.unlink()
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["params"]["item_dim"] == width and config["params"]["item_embeddings"] == params["item_embeddings"]
    assert read_weights(tmp_path / "model")["uvg.item.weight"].shape == (model.store_.cardinality("item"), width)
    loaded = VoucherModel.load(tmp_path / "model")
    assert loaded.predict(world.tables, rows=split.test).equals(before)


def test_freeze_items_keeps_the_table_through_eq6_pretraining_and_training(world, split, store, tmp_path):
    path = tmp_path / "items.parquet"
    _user_table(store, k=4, drop=0, extra=()).to_parquet(path, index=False)
    table = read_item_embeddings(path, store)
    params = {**TINY_GRAPH, "item_embeddings": str(path), "pretrain": 1}
    frozen = VoucherModel("dmbgn", {**params, "freeze_items": True}, TINY_TRAIN).fit(world.tables, rows=split.train,
                                                                                     validation=split.valid)
    assert torch.equal(frozen.net_.uvg.item.weight.detach(), table)
    assert not frozen.net_.uvg.item.weight.requires_grad and frozen.net_.uvg.convs[0].lin_rel.weight.requires_grad
    free = VoucherModel("dmbgn", params, TINY_TRAIN).fit(world.tables, rows=split.train, validation=split.valid)
    assert not torch.equal(free.net_.uvg.item.weight.detach(), table)


def test_item_embedding_parameter_errors(world, split, tmp_path):
    with pytest.raises(DataError, match="item_embeddings applies to DMBGN models only"):
        VoucherModel("din", {"item_embeddings": "metapath2vec"})
    with pytest.raises(DataError, match="freeze_items applies to DMBGN models only"):
        VoucherModel("dnn", {"freeze_items": True})
    with pytest.raises(DataError, match="item_embeddings must be 'metapath2vec' or the path"):
        VoucherModel("dmbgn", {"item_embeddings": 3})
    with pytest.raises(DataError, match="item_pretrain: unknown option 'dims'"):
        VoucherModel("dmbgn", {"item_embeddings": "metapath2vec", "item_pretrain": {"dims": 8}})
    with pytest.raises(DataError, match="no such file"):
        VoucherModel("dmbgn-avgpooling", {**TINY_GRAPH, "item_embeddings": str(tmp_path / "missing.csv")},
                     TINY_TRAIN).fit(world.tables, rows=split.train, validation=split.valid)


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_train_with_item_embeddings(world, store, tmp_path):
    folder = tmp_path
    world.tables.sessions.to_csv(folder / "sessions.csv", index=False)
    world.tables.events.drop(columns=["session", "pre"]).to_csv(folder / "events.csv", index=False)
    world.tables.items.to_parquet(folder / "items.parquet", index=False)
    _user_table(store, k=3, drop=0, extra=()).to_csv(folder / "emb.csv", index=False)
    tables = ["--sessions", folder / "sessions.csv", "--events", folder / "events.csv", "--items",
              folder / "items.parquet", "--categorical", ",".join(PROFILE_CATEGORICAL)]
    net = json.dumps({**TINY_GRAPH, "item_pretrain": FAST})

    def invoke(*args):
        return CliRunner().invoke(app, ["voucher", "train", *map(str, tables), *map(str, args)])

    for source in ("metapath2vec", folder / "emb.csv"):
        result = invoke("--out", folder / "m", "--model", "dmbgn-avgpooling", "--epochs", 1, "--params", net,
                        "--item-embeddings", source, "--freeze-items")
        assert result.exit_code == 0, result.output
        params = json.loads((folder / "m" / "config.json").read_text())["params"]
        assert params["item_embeddings"] == str(source) and params["freeze_items"] is True
    for args, message in ((("--model", "dmbgn", "--item-embeddings", folder / "nope.csv"), "no such file"),
                          (("--model", "din", "--item-embeddings", "metapath2vec"), "DMBGN models only")):
        result = invoke("--out", folder / "m2", *args)
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
