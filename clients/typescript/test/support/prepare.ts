// Run by npm's pretest: builds the storybus binary the tests start, unless
// STORYBUS_BIN names one.

import { buildStorybus } from "./bus.js";

buildStorybus();
