"""Tables in: reading, column contracts, feature specs, encoders, splits and leak-free event histories."""

from promokit.data.encoders import OOV, CategoryEncoder, EncodedFeatures, NumericEncoder, TableEncoder
from promokit.data.errors import DataError
from promokit.data.history import last_events_before
from promokit.data.io import read_table, write_json, write_parquet, write_table, write_text
from promokit.data.spec import FeatureSpec, infer_feature_columns
from promokit.data.split import group_split, holdout_split, latest_split, random_split, time_split

__all__ = ["OOV", "CategoryEncoder", "DataError", "EncodedFeatures", "FeatureSpec", "NumericEncoder",
           "TableEncoder", "group_split", "holdout_split", "infer_feature_columns", "last_events_before",
           "latest_split", "random_split", "read_table", "time_split", "write_json", "write_parquet", "write_table", "write_text"]
