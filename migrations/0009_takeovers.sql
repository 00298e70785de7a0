-- Takeovers (a worker died holding the run's lease and another took it over)
-- are counted apart from failed attempts (model errors, unavailable tools):
-- `make chaos` found a run failed "attempted 3 times without progress"
-- only because three workers were SIGKILLed while it ran its step, which
-- the small failure budget cannot tell from a step that kills its worker.
-- Progress (a new journal entry) resets both.
ALTER TABLE runs ADD COLUMN takeovers integer NOT NULL DEFAULT 0;
