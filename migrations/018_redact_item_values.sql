-- Sensitive fields leave the stored values of the search index.
--
-- memory_items.value held each element whole, so an event's attendees' emails came back in
-- search results and in the element queries (GET /me/events, the digest), although sensitive
-- fields (date_of_birth, email, phone) never become an item's text. The service now drops those
-- keys, at any depth, from an item's value when it writes the item and again when it reads one
-- (domain/items.py: redacted); this removes them from the rows already stored. Texts, and so
-- vectors, never held them. Nothing is created that outlives the migration (the function is a
-- temporary one, dropped at the end), so no privilege changes.

CREATE FUNCTION pg_temp.user_memory_redacted(v jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
  IF jsonb_typeof(v) = 'object' THEN
    RETURN coalesce((SELECT jsonb_object_agg(e.key, pg_temp.user_memory_redacted(e.value))
                       FROM jsonb_each(v) e
                      WHERE e.key NOT IN ('date_of_birth', 'email', 'phone')), '{}'::jsonb);
  ELSIF jsonb_typeof(v) = 'array' THEN
    RETURN coalesce((SELECT jsonb_agg(pg_temp.user_memory_redacted(a.value) ORDER BY a.n)
                       FROM jsonb_array_elements(v) WITH ORDINALITY AS a(value, n)), '[]'::jsonb);
  END IF;
  RETURN v;
END
$$;

UPDATE public.memory_items
   SET value = pg_temp.user_memory_redacted(value)
 WHERE value::text ~ '"(date_of_birth|email|phone)":';

DROP FUNCTION pg_temp.user_memory_redacted(jsonb);
