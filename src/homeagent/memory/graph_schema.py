"""The memory graph's SQLite schema, as numbered migrations (``PRAGMA user_version`` says which ran)."""

from __future__ import annotations

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "entities, aliases, sentences, bitemporal relations, raw records, merge blocks",
        [
            """CREATE TABLE entities (
                id INTEGER PRIMARY KEY,
                name TEXT NOT NULL,
                norm TEXT NOT NULL UNIQUE,
                type TEXT NOT NULL DEFAULT '',
                mention_count INTEGER NOT NULL DEFAULT 0,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                embedding BLOB,
                embed_model TEXT
            )""",
            "CREATE INDEX entities_mentions ON entities(mention_count DESC)",
            "CREATE INDEX entities_unembedded ON entities(mention_count DESC) WHERE embedding IS NULL",
            """CREATE TABLE aliases (
                alias_norm TEXT PRIMARY KEY,
                alias TEXT NOT NULL,
                entity_id INTEGER NOT NULL REFERENCES entities(id)
            )""",
            "CREATE INDEX aliases_entity ON aliases(entity_id)",
            "CREATE VIRTUAL TABLE entity_fts USING fts5(tokens, tokenize='ascii')",
            """CREATE TABLE sentences (
                id INTEGER PRIMARY KEY,
                text TEXT NOT NULL,
                hash TEXT NOT NULL UNIQUE,
                media TEXT,
                created_at REAL NOT NULL
            )""",
            """CREATE TABLE relations (
                id INTEGER PRIMARY KEY,
                subject_id INTEGER NOT NULL REFERENCES entities(id),
                relation TEXT NOT NULL,
                object_id INTEGER NOT NULL REFERENCES entities(id),
                confidence REAL NOT NULL DEFAULT 1.0,
                sentence_id INTEGER REFERENCES sentences(id),
                scene TEXT,
                source TEXT NOT NULL DEFAULT '',
                valid_from REAL,
                valid_to REAL,
                recorded_at REAL NOT NULL,
                retired_at REAL,
                retired_by INTEGER,
                retire_reason TEXT,
                mention_count INTEGER NOT NULL DEFAULT 1,
                last_seen REAL NOT NULL
            )""",
            """CREATE UNIQUE INDEX relations_current_spo ON relations(subject_id, relation, object_id)
               WHERE retired_at IS NULL""",
            "CREATE INDEX relations_current_out ON relations(subject_id, recorded_at) WHERE retired_at IS NULL",
            "CREATE INDEX relations_current_in ON relations(object_id, recorded_at) WHERE retired_at IS NULL",
            "CREATE INDEX relations_all_subject ON relations(subject_id, relation)",
            "CREATE INDEX relations_all_object ON relations(object_id)",
            """CREATE TABLE raw_records (
                id INTEGER PRIMARY KEY,
                session TEXT NOT NULL DEFAULT '',
                role TEXT NOT NULL,
                speaker TEXT NOT NULL DEFAULT '',
                content TEXT NOT NULL,
                ts REAL NOT NULL,
                distilled_at REAL
            )""",
            "CREATE INDEX raw_pending ON raw_records(id) WHERE distilled_at IS NULL",
            "CREATE INDEX raw_ts ON raw_records(ts)",
            """CREATE TABLE merge_blocks (
                a_norm TEXT NOT NULL,
                b_norm TEXT NOT NULL,
                rounds INTEGER NOT NULL,
                PRIMARY KEY (a_norm, b_norm)
            )""",
            """CREATE TABLE loop_state (
                name TEXT PRIMARY KEY,
                value TEXT NOT NULL
            )""",
        ],
    ),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]
