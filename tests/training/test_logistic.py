"""Logistic regression solved to its optimum: the linear floor of every domain."""

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from promokit.conversion import ConversionModel
from promokit.nn import LinearLogit
from promokit.training import fit_logistic
from promokit.metrics import auc
from promokit.data.encoders import CategoryEncoder
from promokit.training.logistic import (L2_GRID, Logloss, _logits, carried_start, design_matrix, newton_cg, prior_l2,
                                       search_l2)


def _data(n, seed, cards=(6, 4)):
    g = torch.Generator().manual_seed(seed)
    cat = torch.stack([torch.randint(0, c, (n,), generator=g) for c in cards], dim=1)
    num = torch.randn(n, 2, generator=g)
    logit = (cat[:, 0].float() - 2.5) * 0.6 - (cat[:, 1] == 2).float() + num[:, 0]
    y = (torch.rand(n, generator=g) < torch.sigmoid(logit)).float()
    return cat, num, y


def test_design_matrix_is_one_hot_per_field_then_numeric():
    cat = torch.tensor([[0, 3], [5, 1]])
    num = torch.tensor([[0.5, -1.0], [2.0, 0.0]])
    x = design_matrix(cat, num, [6, 4]).toarray()
    assert x.shape == (2, 12)
    assert x[0, [0, 9]].tolist() == [1, 1] and x[1, [5, 7]].tolist() == [1, 1]
    assert x[:, 10:].tolist() == num.tolist() and x[:, :10].sum() == 4


def test_fit_logistic_reaches_the_scikit_learn_optimum():
    cat, num, y = _data(600, 0)
    model = LinearLogit([6, 4], 2)
    fit_logistic(model, cat, num, y, l2=0.01)
    reference = LogisticRegression(C=1 / (600 * 0.01), tol=1e-10, max_iter=10_000).fit(
        design_matrix(cat, num, [6, 4]), y.numpy())
    ours = torch.sigmoid(model(cat, num)).detach().numpy()
    np.testing.assert_allclose(ours, reference.predict_proba(design_matrix(cat, num, [6, 4]))[:, 1], atol=2e-3)


_HESSIAN = Logloss.hessian_product  # unpatched, for counting its calls


def test_newton_cg_reaches_the_optimum_at_a_weak_strength_in_few_hessian_products(monkeypatch):
    """At a weak strength only the penalty curves along "a field's weights up, the intercept down"; the
    preconditioner's correction on those directions halves the Hessian products the solve needs (83 without it)."""
    cat, num, y = _data(3000, 2, cards=(40, 12, 5))
    x = design_matrix(cat, num, [40, 12, 5])
    loss = Logloss(x, y.numpy(), [40, 12, 5])
    products = []
    monkeypatch.setattr(Logloss, "hessian_product", lambda self, *a: products.append(1) or _HESSIAN(self, *a))
    theta = newton_cg(loss, 1e-6, 1e-8)
    gradient, _ = loss.gradient(_logits(x, theta), theta, 1e-6)
    assert np.abs(gradient).max() <= 1e-8 and len(products) < 60
    reference = LogisticRegression(C=1 / (3000 * 1e-6), tol=1e-12, max_iter=100_000).fit(x.astype(np.float64), y)
    # the optimum is flat at so weak a strength: scikit-learn's releases stop within 2·10⁻³ of it on logits up to 10
    np.testing.assert_allclose(_logits(x, theta), reference.decision_function(x), rtol=2e-3, atol=1e-3)


def test_the_design_stores_every_numeric_entry_zeros_too():
    x = design_matrix(torch.tensor([[1], [0]]), torch.tensor([[0.0, 2.0], [0.0, 0.0]]), [3])
    assert x.nnz == 6 and x.toarray().tolist() == [[0, 1, 0, 0, 2], [1, 0, 0, 0, 0]]


def test_a_given_strength_is_solved_once_and_must_be_positive():
    train, valid = _data(300, 0), _data(300, 1)
    path = fit_logistic(LinearLogit([6, 4], 2), *train, valid=valid, l2=1e-3)
    assert [(r["l2"], r["chosen"]) for r in path] == [(1e-3, True)]
    with pytest.raises(ValueError, match="must be > 0"):
        fit_logistic(LinearLogit([6, 4], 2), *train, l2=0.0)


def test_fit_logistic_finds_the_grid_strength_with_the_best_validation_auc():
    train, valid = _data(300, 0), _data(2000, 1)
    path = fit_logistic(LinearLogit([6, 4], 2), *train, valid=valid)
    assert sum(r["chosen"] for r in path) == 1 and len(path) < len(L2_GRID)
    every = {}
    for strength in L2_GRID:  # the whole grid, each strength solved alone
        model = LinearLogit([6, 4], 2)
        fit_logistic(model, *train, l2=strength)
        every[strength] = auc(valid[2].numpy(), model(*valid[:2]).detach().numpy())
    chosen = next(r for r in path if r["chosen"])
    assert every[chosen["l2"]] == pytest.approx(max(every.values()), abs=1e-3)


def test_the_chosen_strength_is_solved_on_unless_a_refit_only_starts_from_it(monkeypatch):
    """Searched strengths are solved to the search's tolerance; the kept one is then solved on to the final one,
    except where a refit on every row follows and nothing scores the selected weights (``refit_next``)."""
    import promokit.training.logistic as logistic

    train, valid = _data(600, 0, cards=(30, 8)), _data(600, 1, cards=(30, 8))
    tolerances, solve = [], logistic.newton_cg
    monkeypatch.setattr(logistic, "newton_cg",
                        lambda loss, l2, tol, start=None, progress=None: tolerances.append((l2, tol))
                        or solve(loss, l2, tol, start))
    path = fit_logistic(LinearLogit([30, 8], 2), *train, valid=valid)
    chosen = next(r["l2"] for r in path if r["chosen"])
    assert len(tolerances) == len(path) + 1 and tolerances[-1] == (chosen, min(1e-4, chosen * logistic.TOLERANCE))
    tolerances.clear()
    again = fit_logistic(LinearLogit([30, 8], 2), *train, valid=valid, refit_next=True)
    def searched(records):
        return [(r["l2"], r["valid_auc"], r["chosen"]) for r in records]

    assert searched(again) == searched(path)
    assert len(tolerances) == len(path)
    assert all(tol == min(1e-4, l2 * logistic.SEARCH_TOLERANCE) for l2, tol in tolerances)


@pytest.mark.parametrize("peak, solved", [
    (3e-5, [3e-5, 1e-4, 1e-5]),                        # the prior's neighbour on each side is worse
    (3e-4, [3e-5, 1e-4, 3e-4, 1e-3]),                  # stronger while it improves
    (1e-6, [3e-5, 1e-4, 1e-5, 3e-6, 1e-6]),            # the first stronger step is worse: weaker to the grid's end
])
def test_the_search_starts_at_the_prior_and_steps_toward_the_better_score(peak, solved):
    def solve(strength, start):  # a score peaked at ``peak``, unimodal in log strength
        return strength, -abs(np.log10(strength) - np.log10(peak))

    assert prior_l2(100_000) == 3e-5
    solution, records = search_l2(solve, 100_000)
    assert [r["l2"] for r in records] == pytest.approx(solved) and solution == pytest.approx(peak)
    assert [r["l2"] for r in records if r["chosen"]] == pytest.approx([peak])


def test_without_validation_the_prior_strength_is_solved_alone():
    calls = []
    _, records = search_l2(lambda s, start: calls.append(s) or (s, np.nan), 300, validated=False)
    assert calls == [prior_l2(300)] == [0.01] and records[0]["chosen"]


def test_fit_logistic_needs_both_classes():
    cat, num, _ = _data(50, 0)
    with pytest.raises(ValueError, match="both classes"):
        fit_logistic(LinearLogit([6, 4], 2), cat, num, torch.zeros(50))


def test_conversion_lr_is_the_floor_every_bench_shows(impressions, tmp_path):
    train, test = impressions.iloc[:3000], impressions.iloc[3000:]
    model = ConversionModel("lr").fit(train)
    assert {"l2_ctr", "l2_cvr"} <= set(model.model_params_) and model.params is None
    assert model.history_.unit == "l2 strength"
    metrics = model.evaluate(test)
    assert metrics["ctr_auc"] > 0.65 and metrics["cvr_auc"] > 0.55
    model.save(tmp_path / "lr")
    again = ConversionModel.load(tmp_path / "lr")
    np.testing.assert_allclose(again.predict(test).to_numpy(), model.predict(test).to_numpy())


def test_a_carried_start_moves_each_weight_to_its_category_by_value():
    solved = LinearLogit([4, 3], 1)  # codes: OOV, then 10, 20, 30; OOV, then "x", "y"
    with torch.no_grad():
        solved.weights.table.weight[:, 0] = torch.tensor([0.5, 1.0, 2.0, 3.0, -0.5, 4.0, 5.0])
        solved.numeric.weight.fill_(7.0)
        solved.numeric.bias.fill_(-1.0)
    selected = [CategoryEncoder([10, 20, 30], "int"), CategoryEncoder(["x", "y"], "str")]
    refit = [CategoryEncoder([5, 10, 30], "int"), CategoryEncoder(["w", "x", "y"], "str")]
    # 5 and "w" are new: the selected OOV weight; 20 is gone
    assert carried_start(solved, selected, refit).tolist() == [0.5, 0.5, 1.0, 3.0, -0.5, -0.5, 4.0, 5.0, 7.0, -1.0]


def test_newton_cg_tells_its_progress_of_every_step_until_the_tolerance():
    cat, num, y = _data(3000, 2, cards=(40, 12, 5))
    loss = Logloss(design_matrix(cat, num, [40, 12, 5]), y.numpy(), [40, 12, 5])
    gradients = []
    newton_cg(loss, 1e-4, 1e-8, progress=gradients.append)
    assert len(gradients) >= 3 and gradients[-1] <= 1e-8 < gradients[0]
