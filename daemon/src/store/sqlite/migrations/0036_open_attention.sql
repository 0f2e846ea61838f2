-- `kiki attention list`: the attention events, and each thread's user input by time (an
-- attention is open until the owner gives its thread input after it). Both partial: the
-- other events and inputs, the many, pay nothing.
CREATE INDEX events_attention ON events (seq) WHERE kind = 'attention';
CREATE INDEX inputs_user ON inputs (thread_id, created_at) WHERE kind = 'user';
