"""A training setting given to any estimator overrides that setting alone: the rest keep the domain's defaults,
whether the settings come as a TrainConfig or a dict, and get_params shows what the model will use."""

from dataclasses import fields

import pytest
from sklearn.base import clone

import promokit as pk
from promokit.conversion.defaults import DEFAULT_TRAIN as CONVERSION
from promokit.incentive.defaults import DEFAULT_TRAIN as INCENTIVE
from promokit.training.config import TrainConfig
from promokit.value.defaults import DEFAULT_TRAIN as VALUE
from promokit.voucher.defaults import DEFAULT_TRAIN as VOUCHER

DOMAINS = [(pk.ConversionModel, "esmm", CONVERSION), (pk.VoucherModel, "dnn", VOUCHER),
           (pk.IncentiveModel, "gnn-hazard", INCENTIVE), (pk.ValueModel, "esdpm", VALUE)]


@pytest.mark.parametrize("estimator, model, defaults", DOMAINS, ids=lambda v: getattr(v, "__name__", None))
@pytest.mark.parametrize("given", [TrainConfig(epochs=3), {"epochs": 3}], ids=["TrainConfig", "dict"])
def test_one_override_keeps_every_other_default(estimator, model, defaults, given):
    config = estimator(model, train=given).get_params()["train"]
    assert config.epochs == 3
    for setting in fields(TrainConfig):
        if setting.name != "epochs":
            assert getattr(config, setting.name) == getattr(defaults, setting.name), setting.name


def test_the_domains_differ_where_the_merge_matters():
    """The test above would pass vacuously if the domains kept TrainConfig's own defaults."""
    assert (CONVERSION.lr, CONVERSION.embedding_decay) != (TrainConfig().lr, TrainConfig().embedding_decay)
    assert (INCENTIVE.lr_decay, INCENTIVE.monitor) != (TrainConfig().lr_decay, TrainConfig().monitor)
    assert VOUCHER.batch_size != TrainConfig().batch_size and VALUE.lr != TrainConfig().lr


def test_positional_settings_count_as_given_and_replace_gives_every_setting():
    assert TrainConfig(4, 256).given() == {"epochs": 4, "batch_size": 256}
    from dataclasses import replace

    assert replace(TrainConfig(epochs=4), lr=0.01).given().keys() == TrainConfig().to_dict().keys()


def test_clone_and_set_params_keep_the_merged_settings():
    model = pk.ConversionModel("esmm", train=TrainConfig(epochs=3, progress=False))
    copy = clone(model)
    assert copy.get_params()["train"] == model.get_params()["train"]
    assert copy.train_config.lr == CONVERSION.lr
    model.set_params(train=TrainConfig(lr=0.01))
    assert (model.train_config.lr, model.train_config.epochs) == (0.01, CONVERSION.epochs)


def test_the_default_is_a_copy_the_user_cannot_change_by_accident():
    config = pk.ConversionModel("esmm").get_params()["train"]
    config.epochs = 99
    assert CONVERSION.epochs != 99
