//! Provider formats on real trajectories: what the model sees, call by call, in OpenAI Chat,
//! OpenAI Responses, Anthropic Messages and the seed's ReAct prompt.

mod estimate;
mod log;
mod replay;
mod text;
mod traces;
