import QtQuick
import QtQuick.Controls
import QtQuick.Layouts

// A titled group of rows: a small caps title with a rule, then the content.
ColumnLayout {
    id: root
    property string title
    // A short dim note at the end of the title's rule (e.g. how often the values refresh); none when empty.
    property string aside: ""
    default property alias content: body.data

    Layout.fillWidth: true
    spacing: 4

    RowLayout {
        Layout.fillWidth: true
        Layout.topMargin: 6
        spacing: 8
        Label {
            text: root.title.toUpperCase()
            color: Theme.accent
            font.pixelSize: Theme.title
            font.bold: true
            font.letterSpacing: 1.2
        }
        Rectangle {
            Layout.fillWidth: true
            Layout.preferredHeight: 1
            Layout.alignment: Qt.AlignVCenter
            color: Theme.line
        }
        Label {
            objectName: "aside_" + root.title
            visible: root.aside !== ""
            text: root.aside
            color: Theme.dim
            font.pixelSize: Theme.small
        }
    }
    ColumnLayout {
        id: body
        Layout.fillWidth: true
        spacing: 2
    }
}
