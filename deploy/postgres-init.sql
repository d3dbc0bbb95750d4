-- The session store's database, next to Temporal's own (created by auto-setup).
CREATE DATABASE dplan;
