"""The loader commands: a public data set or a purchase log mapped to a domain's contract and written as its tables
(the library's :mod:`promokit.datasets`, :mod:`promokit.value.transactions`). Each is mounted on its domain's group,
where its tables are trained on: ``promokit conversion kuairand``, ``promokit voucher amexpert``, ``promokit value
from-transactions``."""

from __future__ import annotations

from promokit.cli import support as cs
from promokit.cli.options import conversion as conversion_opt
from promokit.cli.options import value as value_opt
from promokit.cli.options import voucher as voucher_opt
from promokit.console import get_console
from promokit.value.transactions import AMOUNT as AMOUNT_COLUMN
from promokit.value.transactions import CUSTOMER, ONE_FUND
from promokit.value.transactions import TIME as TIME_COLUMN


def kuairand(src: conversion_opt.KuaiSrcOpt, out: conversion_opt.KuaiOutOpt, log: conversion_opt.KuaiLogOpt = None,
             ids: conversion_opt.KuaiIdsOpt = True, purchase: conversion_opt.KuaiPurchaseOpt = "is_follow",
             daction: conversion_opt.KuaiDactionOpt = None, micro_behaviors: conversion_opt.KuaiMicroOpt = None):
    """Map KuaiRand-Pure to the conversion contract: click = is_click, DAction = like | comment | forward |
    profile enter, purchase = is_follow (both on clicked rows; --purchase / --daction choose others), and the
    post-click behaviours as micro-behaviour labels (GMCM). Writes the table, a feature spec beside it
    (OUT.spec.yaml, for --spec; time_key: date; micro_behaviors: the labels) and the load report (OUT.json)."""
    with cs.user_errors(), cs.flags_in_errors(conversion_opt.MICRO_FLAG):
        from promokit.data.uris import as_path
        from promokit.datasets import write_kuairand

        report, spec_path = write_kuairand(src, out, log, ids, purchase, daction, micro_behaviors)
        out, spec_path = as_path(out), as_path(spec_path)  # a URI printed whole
        get_console().print(report.summary(), highlight=False)
        get_console().print(f"table written to {out}, spec to {spec_path}; try: promokit conversion bench --data {out} "
                            f"--spec {spec_path}  (train on the earlier days, test on the latest)")


def amexpert(src: voucher_opt.AmexpertSrc, out: voucher_opt.AmexpertOut):
    """Map AmExpert 2019 to the voucher contract (see docs/voucher.md) and write it as tables, with the load report
    (amexpert.json)."""
    with cs.user_errors():
        from promokit.data.uris import as_path
        from promokit.datasets import convert_amexpert

        tables, report, files = convert_amexpert(src, out)
        console = get_console()
        console.print(report.summary(), highlight=False)
        console.print(f"tables written to {as_path(out)}; try:\npromokit voucher train "
                      f"{voucher_opt.train_command(files, tables.options)} --model dmbgn --out model [--validation …]\n"
                      "then: promokit voucher evaluate … --gauc-by campaign_id", highlight=False, soft_wrap=True)


def from_transactions(transactions: value_opt.TransactionsOpt, out: value_opt.TablesOutOpt,
                      feature_window: value_opt.FeatureWindowOpt, target_window: value_opt.TargetWindowOpt,
                      customer: value_opt.CustomerOpt = CUSTOMER, time: value_opt.TimeOpt = TIME_COLUMN,
                      time_format: value_opt.TimeFormatOpt = None, amount: value_opt.AmountOpt = AMOUNT_COLUMN,
                      product: value_opt.ProductOpt = None, quantity: value_opt.QuantityOpt = None,
                      fund: value_opt.FundOpt = ONE_FUND):
    """Value tables from a purchase log: RFM and spend features from the feature window, each customer's spend (per
    fund) in the target window as the label; train on them with --split random (one delivery time)."""
    with cs.user_errors(), cs.flags_in_errors(value_opt.TRANSACTION_FLAGS):
        from promokit.data.io import read_table
        from promokit.data.uris import as_path
        from promokit.value.transactions import from_transactions as value_frames
        from promokit.value.transactions import write_value_tables

        tables = value_frames(read_table(transactions), feature_window=feature_window, target_window=target_window,
                              customer=customer, time=time, time_format=time_format, amount=amount, product=product,
                              quantity=quantity, fund=fund)
        write_value_tables(tables, out)
        out = as_path(out)  # a URI printed whole
        n = tables.summary()
        get_console().print(f"{n['customers']:,} customers, {n['funds']} fund{'s' * (n['funds'] > 1)}, "
                            f"{n['deliveries']:,} deliveries ({n['spend_share']:.1%} spend in the target window) and "
                            f"{n['behaviors']:,} purchases as behaviours written to {out}; left out: "
                            f"{n['new_customers']:,} of the {n['target_customers']:,} customers of the target window, "
                            "with no purchase in the feature window; train with: "
                            f"promokit value train --data {out} --split random --out MODEL")
