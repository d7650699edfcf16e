//! [`ListChanged`]: the lists whose changes `subscriptions/listen` streams
//! announce, each with its notification method and its listen filter flag.

/// A list whose changes `subscriptions/listen` streams announce: the one
/// place its notification method and its listen filter flag are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListChanged {
    /// `tools/list`: `notifications/tools/list_changed`, filter `toolsListChanged`.
    Tools,
    /// `prompts/list`: `notifications/prompts/list_changed`, filter `promptsListChanged`.
    Prompts,
    /// `resources/list`: `notifications/resources/list_changed`, filter `resourcesListChanged`.
    Resources,
}

impl ListChanged {
    /// Every list, in the order a listen acknowledgement names them.
    pub const ALL: [ListChanged; 3] = [ListChanged::Tools, ListChanged::Prompts, ListChanged::Resources];

    /// The notification method (also the bus event that carries it).
    pub const fn method(self) -> &'static str {
        match self {
            ListChanged::Tools => "notifications/tools/list_changed",
            ListChanged::Prompts => "notifications/prompts/list_changed",
            ListChanged::Resources => "notifications/resources/list_changed",
        }
    }

    /// The `subscriptions/listen` filter flag that asks for it.
    pub const fn filter_flag(self) -> &'static str {
        match self {
            ListChanged::Tools => "toolsListChanged",
            ListChanged::Prompts => "promptsListChanged",
            ListChanged::Resources => "resourcesListChanged",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ListChanged;

    #[test]
    fn each_list_names_its_method_and_filter_flag_alike() {
        for (list, name) in ListChanged::ALL.into_iter().zip(["tools", "prompts", "resources"]) {
            assert_eq!(list.method(), format!("notifications/{name}/list_changed"));
            assert_eq!(list.filter_flag(), format!("{name}ListChanged"));
        }
    }
}
