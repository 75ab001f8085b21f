import numpy as np
import pandas as pd
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def impressions() -> pd.DataFrame:
    """A small impression log whose click and purchase depend on a user feature and an item price."""
    rng = np.random.default_rng(0)
    n = 4000
    user = rng.integers(0, 50, n)
    item = rng.integers(0, 30, n)
    segment = user % 3
    price = rng.normal(50, 10, n)
    logit = -1.5 + 1.2 * (segment == 1) - 0.04 * (price - 50)
    click = rng.random(n) < 1 / (1 + np.exp(-logit))
    daction = click & (rng.random(n) < 0.3 + 0.3 * (segment == 2))
    purchase = click & (rng.random(n) < np.where(daction, 0.5, 0.1))
    return pd.DataFrame({"user_id": user, "item_id": item, "segment": [f"s{s}" for s in segment],
                         "price": price, "click": click.astype(int), "daction": daction.astype(int),
                         "purchase": purchase.astype(int)})
