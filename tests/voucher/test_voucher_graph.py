"""UVG construction and batching (DMBGN §3.2), the DMBGN model (eqs. 1–10) and voucher pre-training (eq. 6)."""

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from promokit.data import DataError
from promokit.metrics import auc
from promokit.training import TrainConfig, Trainer
from promokit.voucher.graph import UVGStore
from promokit.voucher.models.base import FieldLayout
from promokit.voucher.models.dmbgn import DMBGN, aux_loss
from promokit.voucher.pretrain import pretrain_uvg


def tables(sessions, events, items=None):
    if items is None:
        ids = sorted(set(events["item_id"])) or [0]
        items = pd.DataFrame({"item_id": ids, "category": [f"c{i % 3}" for i in ids], "brand": 0,
                              "price_level": [i % 2 for i in ids]})
    return SimpleNamespace(sessions=sessions, events=events, items=items)


def sessions_frame(n, collect=100.0, outcome=200.0):
    return pd.DataFrame({"session_id": np.arange(10, 10 + n), "user_id": np.arange(n) % 2,
                         "voucher_id": [f"v{i % 2}" for i in range(n)], "min_spend": 10.0 + np.arange(n),
                         "discount": 1.0 + np.arange(n) % 3, "collect_time": collect + 100.0 * np.arange(n),
                         "outcome_time": outcome + 100.0 * np.arange(n), "redeemed": np.arange(n) % 2})


@pytest.fixture
def hand_built():
    """Session 10 (collect 100, outcome 150): pre atc 1@90 2@95 3@97, pre ord 4@96, a click 5@98; post atc 6@110
    7@120 and 9@170 (after the outcome), post ord 8@130. Session 11: one pre atc. Session 12: no events."""
    sessions = sessions_frame(3)
    sessions["collect_time"] = [100.0, 200.0, 300.0]
    sessions["outcome_time"] = [150.0, 260.0, 400.0]
    events = pd.DataFrame({"session_id": [10] * 9 + [11], "item_id": [1, 2, 3, 4, 5, 6, 7, 8, 9, 1],
                           "action": ["atc", "atc", "atc", "ord", "click", "atc", "atc", "ord", "atc", "atc"],
                           "action_time": [90, 95, 97, 96, 98, 110, 120, 130, 170, 150.0]})
    return tables(sessions, events)


def graph_edges(store, row, zones=None):
    """{(source item id or 'V', target item id or 'V')} of one session's batched graph."""
    graph = store.batch([row], zones)
    items = store.encoders["item"].vocabulary
    names = ["V" if z < 0 else items[code - 1] for code, z in zip(graph.x[:, 0].tolist(), graph.zone.tolist())]
    return {(names[s], names[d]) for s, d in graph.edge_index.t().tolist()}, names, graph


def test_uvg_zones_chain_voucher_edges_truncation_and_clicks(hand_built):
    store = UVGStore.build(hand_built, z=6, max_pre_events=3)
    assert store.zones == ("atc_pre", "ord_pre", "atc_post", "ord_post")
    edges, names, graph = graph_edges(store, 0)
    # item 1 is the 4th-nearest pre-collection event (max_pre_events=3), the click 5 is ignored, item 9
    # happened after the outcome: none of them is a node
    assert names == ["V", 2, 3, 4, 6, 7, 8]
    assert graph.zone.tolist() == [-1, 0, 0, 1, 2, 2, 3]
    # chronological chains inside zones (earlier → later), pre items → voucher, voucher → post items
    assert edges == {(2, 3), (6, 7), (2, "V"), (3, "V"), (4, "V"), ("V", 6), ("V", 7), ("V", 8)}
    edges, names, _ = graph_edges(store, 1)
    assert names == ["V", 1] and edges == {(1, "V")}
    edges, names, _ = graph_edges(store, 2)  # a session without events: the voucher node alone
    assert names == ["V"] and edges == set()


def test_voucher_links_to_the_z_nearest_items_of_each_zone():
    sessions = sessions_frame(1)  # collect 100, outcome 200
    times = [50, 60, 70, 80, 90, 99, 110, 120, 130, 140, 150, 160]
    events = pd.DataFrame({"session_id": 10, "item_id": np.arange(1, 13), "action": "atc", "action_time": times})
    store = UVGStore.build(tables(sessions, events), z=3)
    edges, names, _ = graph_edges(store, 0)
    assert {s for s, d in edges if d == "V"} == {4, 5, 6}  # the three latest before collection
    assert {d for s, d in edges if s == "V"} == {7, 8, 9}  # the three earliest after it
    chain = {(s, d) for s, d in edges if "V" not in (s, d)}
    assert chain == {(i, i + 1) for i in range(1, 6)} | {(i, i + 1) for i in range(7, 12)}


def test_target_batch_has_no_post_collection_nodes_or_edges(hand_built):
    store = UVGStore.build(hand_built)
    edges, names, graph = graph_edges(store, 0, store.target_zones)
    assert store.target_zones == ("atc_pre", "ord_pre")
    assert set(graph.zone.tolist()) == {-1, 0, 1}
    assert names == ["V", 1, 2, 3, 4] and edges == {(1, 2), (2, 3), (1, "V"), (2, "V"), (3, "V"), (4, "V")}


def test_model_target_prediction_ignores_the_target_post_collection_behaviour(hand_built):
    other = hand_built.events.copy()
    other.loc[other["action_time"].between(100, 150), "item_id"] = 3  # change the post-collection items
    other = pd.concat([other, pd.DataFrame({"session_id": [10], "item_id": [2], "action": ["ord"],
                                            "action_time": [140.0]})])
    stores = [UVGStore.build(hand_built), UVGStore.build(tables(hand_built.sessions, other, hand_built.items))]
    assert stores[0].node_ptr[1] != stores[1].node_ptr[1]
    torch.manual_seed(0)
    model = DMBGN(FieldLayout((3,), 1), stores[0], dropout=0.0).eval()
    batch = {"cat": torch.tensor([[1], [2]]), "num": torch.zeros(2, 1), "session": torch.tensor([0, 1]),
             "history": torch.full((2, 6), -1), "redeemed": torch.tensor([1.0, 0.0])}
    p = [model.attach(store)(batch)["p_redeem"] for store in stores]
    torch.testing.assert_close(p[0], p[1])


def test_batch_offsets_match_single_graphs(hand_built):
    store = UVGStore.build(hand_built, z=2)
    together = store.batch(torch.tensor([2, 0, 1, 0]))
    assert together.num_graphs == 4 and together.ptr.tolist() == [0, 1, 9, 11, 19]
    assert together.voucher_index.tolist() == [0, 1, 9, 11]
    assert together.batch.tolist() == [0] + [1] * 8 + [2] * 2 + [3] * 8
    for position, row in enumerate([2, 0, 1, 0]):
        single = store.batch([row])
        start = together.ptr[position].item()
        mine = together.edge_index[:, together.batch[together.edge_index[0]] == position] - start
        assert torch.equal(mine, single.edge_index)
        assert torch.equal(together.x[together.batch == position], single.x)
    assert together.voucher.tolist() == store.session_voucher[[2, 0, 1, 0]].tolist()


def test_store_save_load_round_trip(tmp_path, hand_built):
    store = UVGStore.build(hand_built, z=2, max_pre_events=3)
    path = tmp_path / "uvg.npz"
    store.save(path)
    loaded = UVGStore.load(path)
    assert loaded.zones == store.zones and loaded.target_zones == store.target_zones
    for name in ("node_ptr", "node_item", "node_zone", "edge_ptr", "edge_index", "session_schema"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(store, name))
    a, b = store.batch([0, 1, 2]), loaded.batch([0, 1, 2])
    for key in ("x", "zone", "edge_index", "batch", "voucher", "schema"):
        assert torch.equal(a[key], b[key])
    assert loaded.encoders["item"].vocabulary == store.encoders["item"].vocabulary


def test_store_errors(hand_built):
    bad = tables(hand_built.sessions, pd.concat([hand_built.events, pd.DataFrame(
        {"session_id": [99], "item_id": [1], "action": ["atc"], "action_time": [1.0]})]), hand_built.items)
    with pytest.raises(DataError, match="session_id not in sessions"):
        UVGStore.build(bad)
    store = UVGStore.build(hand_built)
    with pytest.raises(DataError, match="outside"):
        store.batch([3])
    with pytest.raises(DataError, match="unknown"):
        store.batch([0], zones=("click_pre",))
    with pytest.raises(DataError, match="zones"):
        UVGStore.build(hand_built, actions=("atc", "ord", "click"), vocabulary=store.vocabulary())
    with pytest.raises(DataError, match="not both"):
        UVGStore.build(hand_built, fit_rows=[0], vocabulary=store.vocabulary())


def test_fit_rows_restrict_vocabularies(hand_built):
    store = UVGStore.build(hand_built, fit_rows=[1])
    assert store.encoders["item"].vocabulary == [1]  # session 11 acted on item 1 only
    # session 10: voucher, item 1 (code 1), items 2, 3, 4, 6, 7, 8 out of the fit vocabulary (code 0)
    assert store.batch([0]).x[:, 0].tolist() == [0, 1, 0, 0, 0, 0, 0, 0]
    assert store.encoders["voucher"].vocabulary == ["v1"]


def test_a_saved_vocabulary_gives_the_fitted_codes_and_oov_0(hand_built):
    fitted = UVGStore.build(hand_built, fit_rows=[1, 2])
    vocabulary = json.loads(json.dumps(fitted.vocabulary()))  # plain JSON
    again = UVGStore.build(hand_built, vocabulary=vocabulary)
    for name in ("node_item", "node_features", "node_zone", "edge_index", "session_voucher", "session_schema"):
        np.testing.assert_array_equal(getattr(again, name), getattr(fitted, name))
    empty = UVGStore.empty(vocabulary)
    assert empty.n_sessions == 0 and empty.zones == fitted.zones and empty.item_features == fitted.item_features
    assert [empty.cardinality(name) for name in ("item", "voucher")] == [2, 3]
    # other tables: item 99 and voucher v7 are not in the vocabulary (code 0); item 1 keeps its code 1; the
    # voucher terms min_spend 10, discount 1 use the fit sessions' mean 11.5, 2.5 and std 0.5, 0.5
    sessions = sessions_frame(1).assign(voucher_id="v7")
    events = pd.DataFrame({"session_id": 10, "item_id": [99, 1], "action": "atc", "action_time": [90.0, 95.0]})
    other = UVGStore.build(tables(sessions, events), vocabulary=vocabulary)
    assert other.batch([0]).x[:, 0].tolist() == [0, 0, 1] and other.session_voucher.tolist() == [0]
    assert other.session_schema.tolist() == [[-3.0, -3.0]]


def test_voucher_items_star_graph():
    sessions = sessions_frame(3)
    voucher_items = pd.DataFrame({"voucher_id": ["v0", "v0", "v0", "v1", "v9"], "item_id": [5, 3, 4, 3, 1]})
    items = pd.DataFrame({"item_id": [1, 3, 4, 5], "category": "a", "brand": 0, "price_level": 1})
    store = UVGStore.from_voucher_items(sessions, voucher_items, items, max_items=2)
    assert store.zones == store.target_zones == ("items",)
    assert store.n_graphs == 2 and store.session_graph.tolist() == [0, 1, 0]
    edges, names, _ = graph_edges(store, 0)
    assert names == ["V", 3, 4]  # the first two items of v0 in item order
    assert edges == {(3, "V"), (4, "V"), ("V", 3), ("V", 4)}


def test_an_item_node_carries_whether_its_voucher_applies_to_it(hand_built):
    scopes = pd.DataFrame({"voucher_id": ["v0", "v0", "v1"], "item_id": [1, 4, 2]})
    world = SimpleNamespace(**vars(hand_built), voucher_items=scopes)
    store = UVGStore.build(world)
    assert store.scoped and store.node_cardinalities == [store.cardinality(f) for f in store.item_features] + [3]
    for row, expected in ((0, {"V": 0, 1: 2, 2: 1, 3: 1, 4: 2, 6: 1, 7: 1, 8: 1}), (1, {"V": 0, 1: 1})):
        _, names, graph = graph_edges(store, row)  # session 10 collects v0 (items 1 and 4), session 11 v1 (item 2)
        assert dict(zip(names, graph.x[:, -1].tolist())) == expected
    vocabulary = json.loads(json.dumps(store.vocabulary()))
    assert vocabulary["scoped"] and np.array_equal(UVGStore.build(world, vocabulary=vocabulary).node_features,
                                                   store.node_features)
    assert UVGStore.empty(vocabulary).node_features.shape == (0, len(store.item_features) + 1)
    with pytest.warns(UserWarning, match="no voucher_items: every item's scope is read as unknown"):
        unknown = UVGStore.build(hand_built, vocabulary=vocabulary)
    assert unknown.scoped and set(unknown.node_features[:, -1].tolist()) == {0}
    assert not UVGStore.build(hand_built).scoped  # no voucher_items: the nodes carry no scope code
    assert store.batch([0]).x.shape[1] == UVGStore.build(hand_built).batch([0]).x.shape[1] + 1


def test_a_voucher_voucher_items_do_not_list_has_its_items_scope_unknown(hand_built):
    scopes = pd.DataFrame({"voucher_id": ["v0"], "item_id": [1]})  # v1 (session 11) unlisted
    store = UVGStore.build(SimpleNamespace(**vars(hand_built), voucher_items=scopes))
    _, names, graph = graph_edges(store, 1)
    assert dict(zip(names, graph.x[:, -1].tolist())) == {"V": 0, 1: 0}


def test_a_part_without_events_gets_behaviour_graphs_when_told():
    sessions = sessions_frame(2)
    empty = pd.DataFrame({"session_id": [], "item_id": [], "action": [], "action_time": []})
    part = SimpleNamespace(sessions=sessions, events=empty, items=pd.DataFrame({"item_id": [1], "category": ["a"]}),
                           voucher_items=pd.DataFrame({"voucher_id": ["v0"], "item_id": [1]}))
    assert UVGStore.build(part).zones == ("items",)
    store = UVGStore.build(part, behaviour=True)
    assert store.zones != ("items",) and store.scoped and store.batch([0, 1]).x[:, 0].tolist() == [0, 0]
    assert UVGStore.build(part, vocabulary=store.vocabulary()).zones == store.zones  # the vocabulary's kind


def test_distinct_collapses_sessions_whose_uvgs_are_identical():
    """Sessions 0, 2, 4 collect v0 (one star graph); 0 and 4 also share the terms (min_spend differs, so only
    if set equal): they collapse, 2 does not."""
    sessions = sessions_frame(5).assign(min_spend=[10.0, 11.0, 12.0, 13.0, 10.0], discount=1.0)
    voucher_items = pd.DataFrame({"voucher_id": ["v0", "v0", "v1"], "item_id": [3, 4, 3]})
    items = pd.DataFrame({"item_id": [3, 4], "category": "a", "brand": 0, "price_level": 1})
    store = UVGStore.from_voucher_items(sessions, voucher_items, items)
    rows = torch.tensor([4, 0, 2, 1, 0])
    first, position = store.distinct(rows)
    assert len(first) == 3
    assert position[0] == position[1] == position[4]  # sessions 4, 0, 0: one UVG
    assert len({int(position[1]), int(position[2]), int(position[3])}) == 3
    for i, row in enumerate(rows):  # every row's representative has its graph, voucher and terms
        rep = int(first[position[i]])
        assert store.session_graph[rep] == store.session_graph[row] and store.session_voucher[rep] == store.session_voucher[row]
        assert np.array_equal(store.session_schema[rep], store.session_schema[row])


# ------------------------------------------------------------------ model
def small_batch(store, n=4):
    return {"cat": torch.tensor([[1, 2]] * n), "num": torch.zeros(n, 1), "session": torch.arange(n) % store.n_sessions,
            "history": torch.tensor([[1, 2, -1, -1, -1, -1], [-1] * 6, [0, -1, -1, -1, -1, -1], [2, 1, 0, -1, -1, -1]]),
            "redeemed": torch.tensor([1.0, 0.0, 1.0, 0.0])}


@pytest.mark.parametrize("params", [{}, {"encoder": "avg"}, {"history_pooling": "avg"}, {"directed": False}])
def test_dmbgn_forward_shapes_and_state(hand_built, params):
    store = UVGStore.build(hand_built)
    model = DMBGN(FieldLayout((3, 4), 1), store, **params)
    out = model(small_batch(store))
    assert set(out) == {"p_redeem", "s_uvg", "s_history"}
    assert out["p_redeem"].shape == (4,) and out["s_uvg"].shape == (4,) and out["s_history"].shape == (4, 6)
    assert ((out["p_redeem"] > 0) & (out["p_redeem"] < 1)).all()
    assert (out["s_history"][1] == 0).all() and (out["s_history"][0, :2] > 0).all()
    assert not any(key.startswith("store") for key in model.state_dict())
    total, parts = model.loss(out, small_batch(store))
    total.backward()
    assert set(parts) == {"redeem", "aux"}


def test_aux_loss_eq9_by_hand():
    scores = torch.tensor([[0.5, 0.25, 0.9], [0.8, 0.0, 0.0], [0.3, 0.3, 0.3]])
    mask = torch.tensor([[True, True, False], [True, False, False], [False, False, False]])
    expected = ((-np.log(0.5) - np.log(0.25)) / 2 + -np.log(0.8) + 0.0) / 3  # padded 0.9 and 0.0 ignored
    assert aux_loss(scores, mask).item() == pytest.approx(expected, rel=1e-6)


def test_loss_eq10_alpha(hand_built):
    store = UVGStore.build(hand_built)
    torch.manual_seed(0)
    model = DMBGN(FieldLayout((3, 4), 1), store, dropout=0.0, alpha=0.0).eval()
    batch = small_batch(store)
    out = model(batch)
    total0, parts = model.loss(out, batch)
    p, y = out["p_redeem"].detach().double(), batch["redeemed"].double()
    assert total0.item() == pytest.approx(-(y * p.log() + (1 - y) * (1 - p).log()).mean().item(), rel=1e-5)
    model.alpha = 0.5
    total, parts = model.loss(out, batch)
    assert total.item() == pytest.approx(total0.item() + 0.5 * aux_loss(out["s_history"], batch["history"] >= 0)
                                         .item(), rel=1e-6)
    assert parts["aux"] > 0
    changed = dict(batch, history=batch["history"].clone())  # padding scores never count
    out_padded = dict(out, s_history=out["s_history"].detach().masked_fill(batch["history"] < 0, 1e-6))
    assert model.loss(out_padded, changed)[0].item() == pytest.approx(total.item(), rel=1e-6)


# ------------------------------------------------------------------ learning
def synthetic_world(n_sessions=1200, seed=0):
    """Redemption is decided by whether the pre-collection add-to-cart zone holds an item of category 'hot';
    post-collection orders also favour redeemed sessions (only the history may use them)."""
    rng = np.random.default_rng(seed)
    sessions = pd.DataFrame({"session_id": np.arange(n_sessions), "user_id": rng.integers(0, 300, n_sessions),
                             "voucher_id": rng.integers(0, 4, n_sessions), "min_spend": 10.0, "discount": 2.0,
                             "collect_time": 1000.0 * np.arange(n_sessions) + 500.0})
    sessions["outcome_time"] = sessions["collect_time"] + 400.0
    hot = rng.random(n_sessions) < 0.4
    sessions["redeemed"] = (hot ^ (rng.random(n_sessions) < 0.05)).astype(int)
    n_pre = 5
    owner = np.repeat(np.arange(n_sessions), n_pre)
    item = rng.integers(10, 60, owner.size)  # items 10..59: cold
    first = np.arange(n_sessions) * n_pre
    item[first[hot]] = rng.integers(0, 10, hot.sum())  # items 0..9: hot
    time = sessions["collect_time"].to_numpy()[owner] - rng.uniform(1, 400, owner.size)
    events = pd.DataFrame({"session_id": owner, "item_id": item, "action": "atc", "action_time": time})
    items = pd.DataFrame({"item_id": np.arange(60), "category": np.where(np.arange(60) < 10, "hot", "cold"),
                          "brand": 0, "price_level": np.arange(60) % 3})
    return tables(sessions, events, items)


def tensors(world, rows):
    s = world.sessions
    return {"cat": torch.tensor(s["voucher_id"].to_numpy()[rows] + 1).unsqueeze(1),
            "num": torch.zeros(len(rows), 1), "session": torch.as_tensor(rows),
            "history": torch.full((len(rows), 6), -1), "redeemed": torch.tensor(s["redeemed"].to_numpy()[rows],
                                                                               dtype=torch.float32)}


def test_dmbgn_learns_the_pre_collection_category_signal():
    world = synthetic_world()
    store = UVGStore.build(world)
    train, test = np.arange(0, 900), np.arange(900, 1200)
    torch.manual_seed(0)
    model = DMBGN(FieldLayout((5,), 1), store, dropout=0.0, uvg_dim=16)
    trainer = Trainer(TrainConfig(epochs=8, batch_size=64, lr=3e-3, progress=False))
    trainer.fit(model, tensors(world, train))
    p = trainer.predict(model, tensors(world, test))["p_redeem"].numpy()
    assert auc(world.sessions["redeemed"].to_numpy()[test], p) > 0.85


def scope_world(n_sessions=1500, n_vouchers=300, seed=0):
    """Each voucher applies to the items of one of four categories; a session is redeemed when its one
    pre-collection add-to-cart falls in its voucher's scope. Vouchers are many and seen about five times each, so
    what a voucher covers must be read from ``voucher_items``: neither the item nor the voucher id predicts it."""
    rng = np.random.default_rng(seed)
    voucher = rng.integers(0, n_vouchers, n_sessions)
    covers = rng.integers(0, 4, n_vouchers)
    item = rng.integers(0, 40, n_sessions)  # category = item % 4
    sessions = pd.DataFrame({"session_id": np.arange(n_sessions), "user_id": np.arange(n_sessions),
                             "voucher_id": voucher, "min_spend": 10.0, "discount": 2.0,
                             "collect_time": 1000.0 * np.arange(n_sessions) + 500.0,
                             "redeemed": (item % 4 == covers[voucher]).astype(int)})
    sessions["outcome_time"] = sessions["collect_time"] + 400.0
    events = pd.DataFrame({"session_id": np.arange(n_sessions), "item_id": item, "action": "atc",
                           "action_time": sessions["collect_time"] - 10.0})
    items = pd.DataFrame({"item_id": np.arange(40), "category": np.arange(40) % 4, "brand": 0, "price_level": 0})
    scopes = pd.DataFrame({"voucher_id": np.repeat(np.arange(n_vouchers), 10),
                           "item_id": (covers[:, None] + 4 * np.arange(10)).ravel()})
    return SimpleNamespace(sessions=sessions, events=events, items=items, voucher_items=scopes)


def test_dmbgn_reads_the_voucher_scope_it_cannot_learn_from_the_ids():
    world = scope_world()
    train, test = np.arange(0, 1200), np.arange(1200, 1500)
    scores = {}
    for scoped in (True, False):
        data = world if scoped else SimpleNamespace(**{**vars(world), "voucher_items": None})
        store = UVGStore.build(data, fit_rows=train)
        torch.manual_seed(0)
        model = DMBGN(FieldLayout((301,), 1), store, dropout=0.0, uvg_dim=16)
        trainer = Trainer(TrainConfig(epochs=6, batch_size=64, lr=3e-3, progress=False))
        batch = {"cat": torch.as_tensor(world.sessions["voucher_id"].to_numpy() + 1).unsqueeze(1),
                 "num": torch.zeros(1500, 1), "session": torch.arange(1500), "history": torch.full((1500, 6), -1),
                 "redeemed": torch.as_tensor(world.sessions["redeemed"].to_numpy(), dtype=torch.float32)}
        trainer.fit(model, {k: v[train] for k, v in batch.items()})
        p = trainer.predict(model, {k: v[test] for k, v in batch.items()})["p_redeem"].numpy()
        scores[scoped] = auc(world.sessions["redeemed"].to_numpy()[test], p)
    assert scores[True] > 0.9 and scores[False] < 0.7, scores


def test_pretraining_learns_eq6_and_initialises_dmbgn():
    world = synthetic_world(n_sessions=600)
    store = UVGStore.build(world)
    rows = np.arange(400)
    pre = pretrain_uvg(store, rows, world.sessions["redeemed"].to_numpy()[rows], uvg_dim=16, epochs=6,
                       batch_size=64, lr=3e-3)
    assert len(pre.losses) == 6 and pre.losses[-1] < pre.losses[0]
    model = DMBGN(FieldLayout((5,), 1), store, **pre.params, pretrained=pre.state, freeze_pretrained=True)
    for key, value in pre.state.items():
        assert torch.equal(model.uvg.state_dict()[key], value)
    assert not any(p.requires_grad for p in model.uvg.parameters())
    with pytest.raises(DataError, match="not 0/1"):
        pretrain_uvg(store, [0, 1], [0, 2])


def test_voucher_items_without_terms_or_price_level_through_dmbgn():
    """AmExpert's shape: no min_spend / discount, items with a category only."""
    sessions = sessions_frame(3).drop(columns=["min_spend", "discount"])
    voucher_items = pd.DataFrame({"voucher_id": ["v0", "v0", "v1"], "item_id": [1, 2, 2]})
    items = pd.DataFrame({"item_id": [1, 2], "category": ["a", "b"]})
    store = UVGStore.from_voucher_items(sessions, voucher_items, items)
    assert store.item_features == ("category",) and store.schema_columns == ()
    assert store.batch([0, 1]).x.tolist() == [[0, 0], [1, 1], [2, 2], [0, 0], [2, 2]]
    model = DMBGN(FieldLayout((3,), 0), store, dropout=0.0)
    batch = {"cat": torch.tensor([[1], [2], [1]]), "num": torch.zeros(3, 0), "session": torch.arange(3),
             "history": torch.tensor([[-1] * 6, [0] + [-1] * 5, [1, 0] + [-1] * 4]), "redeemed": torch.ones(3)}
    assert model(batch)["p_redeem"].shape == (3,)


def test_build_without_events_uses_voucher_items():
    sessions = sessions_frame(2)
    empty = pd.DataFrame({"session_id": [], "item_id": [], "action": [], "action_time": []})
    items = pd.DataFrame({"item_id": [1, 2], "category": ["a", "b"]})
    world = SimpleNamespace(sessions=sessions, events=empty, items=items,
                            voucher_items=pd.DataFrame({"voucher_id": ["v0", "v1"], "item_id": [1, 2]}))
    store = UVGStore.build(world)
    assert store.zones == ("items",) and store.batch([0, 1]).x[:, 0].tolist() == [0, 1, 0, 2]
    vocabulary = UVGStore.build(world, fit_rows=[0]).vocabulary()  # v0 and its item 1 only
    reused = UVGStore.build(world, vocabulary=vocabulary)
    assert reused.batch([0, 1]).x[:, 0].tolist() == [0, 1, 0, 0] and reused.session_voucher.tolist() == [1, 0]
