-- The session store's database (DPLAN_SESSION_STORE), beside Temporal's own `temporal` and
-- `temporal_visibility` (created by the temporal-schema service). PostgreSQL runs this once,
-- when it initialises an empty data volume.
CREATE DATABASE dplan;
