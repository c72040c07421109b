#!/usr/bin/env bash
# A curl session against a running `user-memory serve` (default schema, user_state; docs/api.md has every route):
#
#   user-memory serve                       # in another terminal
#   scripts/curl_session.sh [USER_ID]       # BASE_URL=http://127.0.0.1:8080 by default
#
# A token from `user-memory token`, then: read, edit with If-Match (and a stale one: 412),
# history, diff, prune, revert, key-value put/get, erase. Needs curl and python3 (and the
# `user-memory` command: on PATH, this checkout's .venv, or $USER_MEMORY).
set -euo pipefail

BASE_URL="${BASE_URL:-http://127.0.0.1:8080}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -n "${USER_MEMORY:-}" ]]; then
  user_memory="$USER_MEMORY"
elif command -v user-memory >/dev/null 2>&1; then
  user_memory="user-memory"
else
  user_memory="$(cd "$here/.." && pwd)/.venv/bin/user-memory"
fi
USER_ID="${1:-$(python3 -c 'import uuid; print(uuid.uuid4())')}"

headers="$(mktemp)"
body="$(mktemp)"
trap 'rm -f "$headers" "$body"' EXIT

# call METHOD PATH [curl options...]: prints "> METHOD PATH", the status and ETag, then the JSON body.
call() {
  local method="$1" path="$2"
  shift 2
  echo "> $method $path"
  curl -sS -X "$method" -H "Authorization: Bearer $TOKEN" -D "$headers" -o "$body" "$@" "$BASE_URL$path"
  local status etag
  status="$(head -n 1 "$headers" | tr -d '\r')"
  etag="$(grep -i '^etag:' "$headers" | tr -d '\r' | cut -d' ' -f2- || true)"
  echo "< $status${etag:+  ETag: $etag}"
  if [[ -s "$body" ]]; then python3 -m json.tool "$body"; fi
  echo
}

etag() { grep -i '^etag:' "$headers" | tr -d '\r' | cut -d' ' -f2-; }

echo "# user $USER_ID on $BASE_URL"
TOKEN="$("$user_memory" token "$USER_ID")"
echo "# token: $user_memory token $USER_ID"
echo

call GET /me/memory
current="$(etag)"

call PATCH /me/memory -H 'Content-Type: application/merge-patch+json' -H "If-Match: $current" \
  -d '{"summary": "Learning Spanish; prefers short answers", "parts": {"planner": {"name": "Planner", "status": "active"}}}'
current="$(etag)"

call PATCH /me/memory -H 'Content-Type: application/json-patch+json' -H "If-Match: $current" \
  -d '[{"op": "replace", "path": "/summary", "value": "Learning Spanish and Italian; prefers short answers"}]'

echo "# the same edit again, still naming version $current: another write got in first"
call PATCH /me/memory -H 'Content-Type: application/json-patch+json' -H "If-Match: $current" \
  -d '[{"op": "replace", "path": "/summary", "value": "stale"}]'

call GET '/me/memory/history?limit=10'
call GET '/me/memory/diff?from=1&to=2'
call DELETE '/me/memory?section=parts'
call POST /me/memory/revert -H 'Content-Type: application/json' -d '{"version": 2}'

call PUT /me/kv/default/last-icebreaker -H 'Content-Type: application/json' \
  -d '{"value": {"text": "How was the trip to Sevilla?"}, "ttl_seconds": 3600}'
call GET /me/kv/default/last-icebreaker

call DELETE /me
