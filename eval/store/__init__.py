"""The DuckDB results store: schema generated from the row models, transactional writes, a read API."""

from eval.store.database import DuckDBStore, RunMeta, SettingRef, dumps
from eval.store.lifecycle import Record
from eval.store.rows import (
    ClaimRow,
    FamilyVerdictRow,
    GateDecisionRow,
    GateLookRow,
    LatencySlotRow,
    QuestionRow,
    RecommendationRow,
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
    "FamilyVerdictRow",
    "GateDecisionRow",
    "GateLookRow",
    "LatencySlotRow",
    "QuestionRow",
    "Record",
    "RecommendationRow",
    "RunMeta",
    "RunRow",
    "SampleRow",
    "SettingRef",
    "SettingRow",
    "columns",
    "dumps",
    "schema_version",
]
