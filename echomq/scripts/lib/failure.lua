-- What a failure keeps (docs/spec.md §11.6): the bounds on its `error` (last_error) and its
-- traceback, the native grammar's (trafikey's ERROR_MAX_LEN, TRACEBACK_MAX_LEN). FAIL, FAILURES.INCR
-- and their lane and flow twins refuse a longer one before any write; the client cuts its own.
local ERROR_MAX, TRACEBACK_MAX = 4096, 8192

-- failure_refused(error, traceback) -> the refusal of an error over ERROR_MAX bytes or a traceback
-- (nil: none given) over TRACEBACK_MAX, as the native verbs word it; else nil
local function failure_refused(error, traceback)
  if string.len(error) > ERROR_MAX then
    return redis.error_reply('EMQARG error must be at most ' .. ERROR_MAX .. ' bytes, got ' .. string.len(error))
  end
  if traceback and string.len(traceback) > TRACEBACK_MAX then
    return redis.error_reply('EMQARG traceback must be at most ' .. TRACEBACK_MAX .. ' bytes, got '
      .. string.len(traceback))
  end
end

-- an error the server composes (a flow parent's `child <id> failed: <its error>`, which grows with
-- each level it climbs) within ERROR_MAX bytes: its head, cut at a character boundary, then `...`
local function bounded_error(text)
  if string.len(text) <= ERROR_MAX then return text end
  local keep = ERROR_MAX - 3
  while keep > 0 and string.byte(text, keep + 1) >= 0x80 and string.byte(text, keep + 1) < 0xC0 do
    keep = keep - 1  -- the first byte cut continues a character: cut before that character
  end
  return string.sub(text, 1, keep) .. '...'
end
