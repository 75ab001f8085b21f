"""The experiments layer's public names: one scheme for every domain's world, and none left in the domains."""

import pytest

import promokit as pk


@pytest.mark.parametrize("domain", ["conversion", "voucher", "incentive", "value"])
def test_every_domain_world_has_the_same_names_and_lives_in_experiments(domain):
    experiments = getattr(pk.experiments, domain)
    world = getattr(experiments, f"{domain.capitalize()}World")
    assert experiments.make_world.__module__ == world.__module__ == f"promokit.experiments.{domain}.world"
    assert experiments.make_world.__annotations__["return"] in (world, world.__name__)
    assert not {"make_world", world.__name__} & set(getattr(pk, domain).__all__)


@pytest.mark.extra("serve")
def test_the_use_cases_export_no_experiment():
    assert not {"make_budget_instance", "make_quota_instance", "simulate_budget", "simulate_quota"} \
        & set(pk.allocation.__all__)
    assert pk.campaign.__all__ == ["build", "activate_version", "load_campaign", "Campaign", "CampaignConfig", "Pacing"]
    assert pk.experiments.campaign.run_demo.__module__ == "promokit.experiments.campaign.demo"
