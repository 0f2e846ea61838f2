-- A message's source is a whole reference, its thread's workspace included: kept with the
-- message, its queued input and (at a source home) its outbox entry, which sends it along.
ALTER TABLE messages ADD COLUMN source_workspace TEXT NOT NULL DEFAULT '';
ALTER TABLE inputs ADD COLUMN source_workspace TEXT NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN source_workspace TEXT NOT NULL DEFAULT '';
-- A local source's workspace is known: filled in for what is stored already.
UPDATE messages SET source_workspace = COALESCE((SELECT workspace_id FROM threads WHERE threads.id = messages.source_thread), '')
WHERE source_thread IS NOT NULL AND COALESCE(source_host, '') = '';
UPDATE inputs SET source_workspace = COALESCE((SELECT workspace_id FROM threads WHERE threads.id = inputs.source_thread), '')
WHERE source_thread IS NOT NULL AND COALESCE(source_host, '') = '';
UPDATE outbox SET source_workspace = COALESCE((SELECT workspace_id FROM threads WHERE threads.id = outbox.source_thread), '')
WHERE source_thread IS NOT NULL;
