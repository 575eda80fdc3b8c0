//! The four places a flat job can be (SPEC §1): the row's `state` field always names the set
//! the id sits in. Defined once here; every verb writes and checks states through it, and
//! `tests/test_verbs_table.py` compares this list with Python's `State` and the Lua scripts.

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Ready to claim, in `pending`.
    Pending,
    /// Claimed under a lease, in `active`.
    Active,
    /// Due later, in `schedule`.
    Scheduled,
    /// Out of budget, in `dead`.
    Dead,
}

impl State {
    pub const ALL: [State; 4] = [State::Pending, State::Active, State::Scheduled, State::Dead];

    /// The value of the row's `state` field (also FAIL's bulk reply).
    pub const fn field(self) -> &'static [u8] {
        match self {
            State::Pending => b"pending",
            State::Active => b"active",
            State::Scheduled => b"scheduled",
            State::Dead => b"dead",
        }
    }

    /// The suffix of the set that holds a job in this state.
    pub const fn set(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Active => "active",
            State::Scheduled => "schedule",
            State::Dead => "dead",
        }
    }

    /// The state as text, for refusal messages.
    pub fn name(self) -> &'static str {
        std::str::from_utf8(self.field()).unwrap_or("?")
    }
}

#[cfg(test)]
mod tests {
    use super::State;

    #[test]
    fn each_state_names_its_own_set_and_only_scheduled_differs() {
        for state in State::ALL {
            let differs = state.field() != state.set().as_bytes();
            assert_eq!(differs, state == State::Scheduled, "{state:?}");
        }
    }
}
