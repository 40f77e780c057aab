// A bokeh chart as an anywidget, with no CDN and no output_notebook(): the first chart on a page asks
// Python for bokeh's core JS (from the installed bokeh package, so the versions match), runs it once,
// then every chart embeds its json_item.
let loading = null;

function ensureBokeh(model) {
  if (window.Bokeh && window.Bokeh.embed) return Promise.resolve(window.Bokeh);
  if (!loading) {
    loading = new Promise((resolve) => {
      model.on("msg:custom", (message) => {
        if (!message || message.kind !== "bokeh-js" || (window.Bokeh && window.Bokeh.embed)) {
          if (window.Bokeh && window.Bokeh.embed) resolve(window.Bokeh);
          return;
        }
        const script = document.createElement("script");
        script.textContent = message.code;
        document.head.appendChild(script);
        resolve(window.Bokeh);
      });
      model.send({ kind: "bokeh-js" });
    });
  }
  return loading;
}

// BokehJS embeds only into an element under <body>: a view not attached yet (or being moved) draws
// once it is, a view taken off the page draws nothing (the tuner replaces its charts while a run's
// timings arrive; drawing into the removed chart threw "element ... must be under <body>", also when
// the view went between the call and BokehJS's own check, a deferral later).
const ATTACH_WAIT_FRAMES = 600; // ~10 s of animation frames; a later change of the chart tries again

async function render({ model, el }) {
  const box = document.createElement("div");
  box.className = "uv-bokeh";
  el.appendChild(box);
  let removed = false;
  const Bokeh = await ensureBokeh(model);
  const draw = (framesLeft = ATTACH_WAIT_FRAMES) => {
    if (removed) return;
    if (!box.isConnected) {
      if (framesLeft > 0) requestAnimationFrame(() => draw(framesLeft - 1));
      return;
    }
    box.innerHTML = "";
    Bokeh.embed.embed_item(JSON.parse(model.get("item")), box).then(
      () => {
        box.dataset.drawn = "1";
      },
      (error) => {
        // BokehJS looks for the element only after a deferral: a view taken off the page in
        // between rejects with "must be under <body>" (the tuning walk's flake).  A removed view
        // has nothing to draw; one that is only being moved draws once it is attached again
        if (removed) return;
        if (!box.isConnected) {
          draw();
          return;
        }
        throw error;
      },
    );
  };
  const redraw = () => draw(); // (the event's arguments are no frame count)
  draw();
  model.on("change:item", redraw);
  return () => {
    removed = true;
    model.off("change:item", redraw);
  };
}

export default { render };
