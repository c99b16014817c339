"""The DuckDB results store: schema generated from the row models, transactional writes, a read API."""

from eval.store.database import DuckDBStore, RunMeta, SettingRef, dumps
from eval.store.lifecycle import Record
from eval.store.rows import (
    ClaimRow,
    GateDecisionRow,
    GateLookRow,
    LatencySlotRow,
    QuestionRow,
    RunRow,
    SampleRow,
    SettingRow,
)
from eval.store.schema import SCHEMA_VERSION, STORAGE_COMPATIBILITY, TABLES, VIEWS, columns, schema_version

__all__ = [
    "SCHEMA_VERSION",
    "STORAGE_COMPATIBILITY",
    "TABLES",
    "VIEWS",
    "ClaimRow",
    "DuckDBStore",
    "GateDecisionRow",
    "GateLookRow",
    "LatencySlotRow",
    "QuestionRow",
    "Record",
    "RunMeta",
    "RunRow",
    "SampleRow",
    "SettingRef",
    "SettingRow",
    "columns",
    "dumps",
    "schema_version",
]
