//! The calling user ([`Caller`]), held for one command, and its permissions on the derived keys
//! and channels the server does not check for the verb (SPEC §5 check 4).

use std::ffi::c_int;
use std::ptr;

use valkey_module::{raw, Context};

use super::strings::Str;

/// Context flags say the command came over the replication link (no user to check).
pub fn replicated(ctx: &Context) -> bool {
    ctx.get_flags()
        .intersects(valkey_module::ContextFlags::REPLICATED | valkey_module::ContextFlags::LOADING)
}

/// The calling user, held for the command's ACL checks on derived keys.
pub enum Caller {
    /// No client user (replication link, loading): the primary already checked.
    Trusted,
    /// The user, or NULL when the name resolved to no user (every check then fails).
    User(*mut raw::RedisModuleUser),
}

impl Caller {
    pub fn of(ctx: &Context) -> Caller {
        if replicated(ctx) {
            return Caller::Trusted;
        }
        let (Some(name_of), Some(lookup), Some(free)) = (
            api!(RedisModule_GetCurrentUserName),
            api!(RedisModule_GetModuleUserFromUserName),
            api!(RedisModule_FreeString),
        ) else {
            return Caller::User(ptr::null_mut());
        };
        // SAFETY: called from a command handler with its live context; the name string is
        // freed after the lookup; the user is freed in Drop.
        unsafe {
            let name = name_of(ctx.ctx);
            if name.is_null() {
                return Caller::Trusted;
            }
            let user = lookup(name);
            free(ctx.ctx, name);
            Caller::User(user)
        }
    }

    /// The user to ask, or the answer without asking: a trusted caller may, no user may not.
    fn user(&self) -> Result<*mut raw::RedisModuleUser, bool> {
        match self {
            Caller::Trusted => Err(true),
            Caller::User(u) if u.is_null() => Err(false),
            Caller::User(u) => Ok(*u),
        }
    }

    /// Does the user hold `perms` (REDISMODULE_CMD_KEY_* bits) on `key`?
    pub fn allows(&self, key: &Str, perms: u32) -> bool {
        let user = match self.user() {
            Ok(user) => user,
            Err(answer) => return answer,
        };
        let Some(check) = api!(RedisModule_ACLCheckKeyPermissions) else {
            return false;
        };
        // SAFETY: `user` is a live module user held by us; `key` is a live string.
        unsafe { check(user, key.ptr, perms as c_int) == raw::REDISMODULE_OK as c_int }
    }

    /// May the user publish on `channel` (a literal channel name)?
    pub fn allows_channel(&self, channel: &Str) -> bool {
        let user = match self.user() {
            Ok(user) => user,
            Err(answer) => return answer,
        };
        let Some(check) = api!(RedisModule_ACLCheckChannelPermissions) else {
            return false;
        };
        let publish = raw::REDISMODULE_CMD_CHANNEL_PUBLISH as c_int;
        // SAFETY: `user` is a live module user held by us; `channel` is a live string.
        unsafe { check(user, channel.ptr, publish) == raw::REDISMODULE_OK as c_int }
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        if let Caller::User(u) = self {
            if !u.is_null() {
                if let Some(free) = api!(RedisModule_FreeModuleUser) {
                    // SAFETY: obtained from GetModuleUserFromUserName, freed once.
                    unsafe { free(*u) };
                }
            }
        }
    }
}
